"""The Trainer called directly: one step, an evaluation, the loop and the callbacks it calls."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bench.harness import load_config
from common.errors import GptwatchWarning, UserError
from train import TextSample, TrainingLog
from trainer import runtime
from trainer.optim import lr_at
from trainer.start import starting_from
from trainer.trainer import Callback, Evaluation, FitResult, StepResult, Trainer
from watch.callback import AttentionWatch
from watch.measure.reading import untrained_like

TEXT = "".join(
    f"the dog saw the ball and it rolled away {i % 7}.\nthe cat saw the king and he waved.\n" for i in range(60)
)


def make_trainer(tmp_path, *extra: str) -> Trainer:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    cfg = load_config(
        None,
        [
            f"--dataset={corpus}",
            f"--data_dir={tmp_path / 'prep'}",
            f"--out_dir={tmp_path / 'out'}",
            "--n_layer=1",
            "--n_head=2",
            "--n_embd=16",
            "--block_size=16",
            "--batch_size=4",
            "--max_iters=6",
            "--eval_interval=3",
            "--eval_iters=2",
            "--learning_rate=3e-3",
            "--warmup_iters=2",
            "--device=cpu",
            "--run_name=t",
            *extra,
        ],
    )
    return Trainer.from_start(starting_from(cfg).prepared(), runtime.setup(cfg))


class Recorder(Callback):
    """Every hook call, in order, with what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def on_fit_start(self, trainer):
        self.calls.append(("start", trainer.state.step))

    def on_step(self, trainer, result):
        self.calls.append(("step", result))

    def on_evaluate(self, trainer, evaluation):
        self.calls.append(("evaluate", evaluation))

    def on_watch(self, trainer, step):
        self.calls.append(("watch", step))

    def on_fit_end(self, trainer, result):
        self.calls.append(("end", result))

    def on_exit(self, trainer):
        self.calls.append(("exit", None))


class HeadRun:
    def __init__(self, writer, name) -> None:
        self.writer, self.name = writer, name

    def add_scalar(self, tag, value, step):
        self.writer.add_scalar(f"{tag}@{self.name}", value, step)


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: dict[str, list[tuple[int, float]]] = {}
        self.texts: dict[str, list[int]] = {}
        self.figures: dict[str, list[int]] = {}
        self.layouts: list[dict] = []

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, value))

    def head(self, name):  # a head's own run: recorded here as TAG@HEAD
        return HeadRun(self, name)

    def add_text(self, tag, text, step):
        self.texts.setdefault(tag, []).append(step)

    def add_image(self, tag, image, step, dataformats):
        self.figures.setdefault(tag, []).append(step)

    def add_custom_scalars(self, layout):
        self.layouts.append(layout)

    def flush(self):
        pass


def test_the_watchs_untrained_model_is_the_one_training_starts_from(tmp_path):
    trainer = make_trainer(tmp_path, "--seed=7")
    fresh = untrained_like(trainer.model, trainer.cfg.seed)
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), trainer.model.parameters(), strict=True))


def test_a_step_updates_the_parameters_and_reports_its_loss_rate_and_gradient_norm(tmp_path):
    trainer = make_trainer(tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    result = trainer.step()
    assert isinstance(result, StepResult) and result.step == 1 == trainer.state.step
    assert result.lr == lr_at(0, trainer.cfg) and math.isfinite(result.loss) and result.grad_norm > 0
    assert all(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert [p.grad for p in trainer.model.parameters()] == [None] * len(before)  # ready for the next step


def test_steps_lower_the_loss_and_grad_clip_zero_reports_no_norm(tmp_path):
    trainer = make_trainer(tmp_path, "--grad_clip=0", "--max_iters=60")
    first = trainer.evaluate()["train"]
    results = [trainer.step() for _ in range(60)]
    assert all(r.grad_norm is None for r in results)
    assert trainer.evaluate()["train"] < first - 0.5


def test_evaluation_scores_the_same_batches_every_time_and_leaves_training_mode_on(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.model.train()
    assert trainer.evaluate() == trainer.evaluate()
    assert trainer.model.training


def test_fit_calls_the_hooks_in_order_with_what_the_loop_saw(tmp_path):
    trainer = make_trainer(tmp_path)
    recorder = Recorder()
    only_end = type("OnlyEnd", (), {"on_fit_end": lambda self, trainer, result: result.metrics.update(x=1.0)})()
    trainer.callbacks = [recorder, only_end]  # a callback may implement just the hooks it needs
    result = trainer.fit()
    kinds = [kind for kind, _ in recorder.calls]
    assert kinds == [
        "start",
        "evaluate",
        "step",
        "step",
        "step",
        "evaluate",
        "step",
        "step",
        "step",
        "evaluate",
        "end",
        "exit",
    ]
    evaluations = [value for kind, value in recorder.calls if kind == "evaluate"]
    assert [e.step for e in evaluations] == [0, 3, 6] and evaluations == result.evaluations
    assert [value.step for kind, value in recorder.calls if kind == "step"] == [1, 2, 3, 4, 5, 6]
    assert isinstance(result, FitResult) and result.completed and result.steps == 6 and result.metrics == {"x": 1.0}
    assert result.best_val_loss == min(e.val_loss for e in evaluations)
    saved = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert saved["step"] == 6 and saved["best_val_loss"] == result.best_val_loss


def test_on_watch_comes_every_watch_interval_steps_between_evaluations(tmp_path):
    trainer = make_trainer(tmp_path, "--watch_interval=2")
    recorder = Recorder()
    trainer.callbacks = [recorder]
    trainer.fit()
    calls = [(kind, value if kind == "watch" else getattr(value, "step", None)) for kind, value in recorder.calls]
    # Steps 0 and 6 are evaluated, so they are not watched as well.
    assert [call for call in calls if call[0] in ("watch", "evaluate")] == [
        ("evaluate", 0),
        ("watch", 2),
        ("evaluate", 3),
        ("watch", 4),
        ("evaluate", 6),
    ]
    assert calls[calls.index(("watch", 2)) - 1] == ("step", 2)  # after the step it follows
    (tmp_path / "off").mkdir()
    none = make_trainer(tmp_path / "off", "--watch_interval=0")
    none.callbacks = [recorder := Recorder()]
    none.fit()
    assert "watch" not in [kind for kind, _ in recorder.calls]


def test_on_exit_runs_even_when_training_stops_with_an_error(tmp_path):
    trainer = make_trainer(tmp_path, "--learning_rate=1e6", "--max_iters=40")
    recorder = Recorder()
    trainer.callbacks = [recorder]
    with pytest.raises(UserError, match="training stopped"):
        trainer.fit()
    assert recorder.calls[-1] == ("exit", None) and "end" not in [kind for kind, _ in recorder.calls]


def test_training_log_writes_scalars_every_log_interval_and_losses_at_each_evaluation(tmp_path, capsys):
    trainer = make_trainer(tmp_path, "--log_interval=2")
    writer = FakeWriter()
    trainer.callbacks = [TrainingLog(writer)]
    trainer.fit()
    assert [step for step, _ in writer.scalars["loss/train"]] == [2, 4, 6]
    assert [step for step, _ in writer.scalars["loss/val"]] == [0, 3, 6]
    assert {"lr", "grad_norm", "throughput/tokens_per_sec", "loss/train_eval"} <= set(writer.scalars)
    out = capsys.readouterr().out
    assert "step 3: train loss" in out and out.rstrip().splitlines()[-1].startswith("done: 6 steps")


def test_text_sample_logs_at_each_evaluation_and_warns_once_about_a_prompt_it_cannot_encode(tmp_path):
    trainer = make_trainer(tmp_path)
    writer = FakeWriter()
    sample = TextSample(writer, trainer.tokenizer, "the", 5, seed=1)
    sample.on_evaluate(trainer, Evaluation(3, 1.0, 1.0, 0.0))
    assert writer.texts == {"sample": [3]}
    with pytest.warns(GptwatchWarning, match="no text sample will be logged"):
        silent = TextSample(writer, trainer.tokenizer, "QXZ", 5, seed=1)
    silent.on_evaluate(trainer, Evaluation(6, 1.0, 1.0, 0.0))
    assert writer.texts == {"sample": [3]}


def test_attention_watch_plugs_in_as_a_callback(tmp_path, capsys):
    trainer = make_trainer(tmp_path, "--block_size=48", "--watch_interval=2")
    text = "the dog saw the ball and it rolled"
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"text": text, "pronoun": "it", "referent": "ball", "distractor": "dog"}) + "\n")
    writer = FakeWriter()
    watch = AttentionWatch(writer, [text], probes, page=tmp_path / "out" / "attention.html")
    trainer.callbacks = [watch]
    result = trainer.fit()
    # The head table and every layer's heatmaps at evaluations; the scores and the best head's heatmap (a slider of
    # the head that matters forming) also every watch_interval steps between them.
    assert writer.figures["attention/the dog saw the ball and it rolled/layer0"] == [0, 3, 6]
    assert writer.figures["attention/the dog saw the ball and it rolled/best_head"] == [0, 2, 3, 4, 6]
    assert writer.texts["attention/heads"] == [0, 3, 6]
    for tag in (
        "attention/referent/best",
        "attention/referent/L0@L0H1",
        "attention/top1/L0@L0H0",
        "attention/top1/L0@L0H1",
        "heads/induction/L0@L0H1",
        "heads/induction_spread/L0@L0H1",  # beside each score read from random sequences, its spread
        "heads/induction/best_spread",
        "heads/previous_token/L0@L0H0",
        "heads/in_context_gain",
    ):
        assert [step for step, _ in writer.scalars[tag]] == [0, 2, 3, 4, 6], tag
    assert writer.texts["heads/types"] == [0, 3, 6]
    assert len(writer.layouts) == 1  # the Custom Scalars charts, once
    assert {
        "hparam/best_head_referent",
        "hparam/best_head_top1",
        "hparam/best_induction",
        "hparam/best_previous_token",
        "hparam/in_context_gain",
    } <= set(result.metrics)
    assert "held-out probes (pronoun -> referent)" in capsys.readouterr().out
    assert result.files == {"attention page": tmp_path / "out" / "attention.html"}
    assert "best head on 1 probes" in result.files["attention page"].read_text(encoding="utf-8")

    stopped = FitResult(start_step=0, stopped_by=2)
    watch.on_fit_end(trainer, stopped)
    assert stopped.metrics == {} and stopped.files == {}  # no head report or page for a run a signal stopped
