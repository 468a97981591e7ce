"""Fine-tuning a model trained elsewhere (`train.py --init_from=...`): a Hugging Face GPT-2 folder, a nanoGPT
checkpoint and a gptwatch checkpoint, each made here with random weights, train with the watch on, checkpoint, and
resume as printed to the very parameters of a run that never stopped. The model decides the model keys and the
tokenizer: keys that disagree are refused naming both, a smaller block_size crops, a char model refuses the
characters it never had. The watch sets the model before fine-tuning beside the untrained one.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
from pathlib import Path

import pytest
import torch
from conftest import require_gpt2
from test_head_types import hand_results
from test_import import _nanogpt_module, hf_model, nanogpt_model, save_hf, save_meta, save_nanogpt
from test_robustness import SCHEDULE, fit, same_tensors

from common.errors import UsageError
from data.batches import Batches
from data.tokenizer import CharTokenizer, FullGPT2Tokenizer
from formats import load_model
from formats.checkpoint import save_checkpoint
from model.config import GPTConfig
from model.gpt import GPT
from tests.commands import TEXT, one_line, run, tiny_args
from watch.measure.reading import interpret
from watch.show.report import before_table, changed_heads, changes_line, type_labels

CPU = torch.device("cpu")
CHARS = "".join(sorted(set(TEXT)))  # the test corpus's characters: a char model that has them all


def hugging_face(root: Path) -> str:
    """A GPT2LMHeadModel folder of tests.commands's tiny sizes (1 layer of 2 heads, 16 wide) and 64 positions."""
    require_gpt2()
    return str(save_hf(hf_model(n_layer=1, n_head=2, n_embd=16, n_positions=64), root / "hf"))


def nanogpt_char(root: Path, chars: str = CHARS) -> str:
    """A nanoGPT out_dir of the same sizes, made by nanoGPT's own model.py, with its meta.pkl: a char model of
    `chars`, 32 positions."""
    theirs, args = nanogpt_model(
        _nanogpt_module(root), n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=len(chars)
    )
    path = save_nanogpt(theirs, args, root / "out-nano")
    save_meta(path.parent / "meta.pkl", chars)
    return str(path.parent)


def gptwatch_with_a_sink_head(root: Path) -> str:
    """A gptwatch checkpoint (1 layer of 2 heads, char vocabulary of the corpus) whose head L0H0 puts all its weight
    on the first position: position 0 alone has a component along `v`, which head 0's keys read and its query
    (a bias) asks for."""
    config = GPTConfig(vocab_size=len(CHARS), block_size=32, n_layer=1, n_head=2, n_embd=16, qkv_bias=True)
    torch.manual_seed(0)
    model = GPT(config)
    v = torch.zeros(16)
    v[0], v[1] = 1.0, -1.0  # no mean, so LayerNorm keeps the direction
    with torch.no_grad():
        for table in (model.wte.weight, model.wpe.weight):
            table[:, :2] = table[:, :2].mean(dim=1, keepdim=True)  # nothing along v
        model.wpe.weight[0] += 100 * v
        attn = model.blocks[0].attn
        attn.W_key.weight[:8] = 0.0
        attn.W_key.weight[0] = 10 * v / v.norm()
        attn.W_key.bias[:8] = 0.0
        attn.W_query.weight[:8] = 0.0
        attn.W_query.bias[:8] = 0.0
        attn.W_query.bias[0] = 10.0
    path = root / "sink" / "ckpt.pt"
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "model_config": config.to_dict(),
            "tokenizer": CharTokenizer(CHARS).to_meta(),
            "step": 100,
        },
    )
    return str(path.parent)


def written(root: Path) -> list[str]:
    """What a refused run left: any checkpoint, prepared data or TensorBoard file (out_dir itself is made, and
    locked, before the run starts)."""
    return sorted(str(p.relative_to(root)) for pattern in ("out/*", "prep/*", "runs/*") for p in root.glob(pattern))


def train(root: Path, *args: str) -> tuple[int, str, str]:
    return run("train", tiny_args(root, *args))


def checkpoint(folder: Path) -> dict:
    return torch.load(folder / "ckpt.pt", weights_only=True)


def interrupt_during_step_two(monkeypatch) -> None:
    """Ctrl-C while step 2 draws its batch: the run finishes that step, saves step 3 and stops."""
    draws = {"n": 0}
    original = Batches.train

    def train_batch(self):
        draws["n"] += 1
        if draws["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self)

    monkeypatch.setattr(Batches, "train", train_batch)


# --- a fine-tune runs, checkpoints and resumes exactly -----------------------------------------------------


@pytest.mark.parametrize("source", ["nanogpt", "gptwatch"])
def test_a_fine_tune_resumes_as_printed_and_ends_where_an_uninterrupted_one_ends(source, tmp_path, monkeypatch):
    """With the watch on, as train.py runs (a Hugging Face model's fine-tune: `test_init_from_resume_is_resume`)."""
    init_from = nanogpt_char(tmp_path) if source == "nanogpt" else gptwatch_with_a_sink_head(tmp_path)
    code, out, err = train(tmp_path, f"--init_from={init_from}", f"--out_dir={tmp_path / 'straight'}", "--run_name=a")
    assert (code, err) == (0, "")
    assert f"fine-tuning {'nanoGPT' if source == 'nanogpt' else 'gptwatch'} checkpoint" in out

    interrupt_during_step_two(monkeypatch)
    code, out, err = train(tmp_path, f"--init_from={init_from}", f"--out_dir={tmp_path / 'stopped'}", "--run_name=b")
    monkeypatch.undo()
    assert code == 128 + signal.SIGINT and checkpoint(tmp_path / "stopped")["step"] == 3
    command = shlex.split(re.search(r"resume with: (.*)$", out, re.M)[1])
    assert command[:2] == ["python", "train.py"] and command[-1] == "--resume"
    code, out, err = run("train", command[2:])  # the command as printed
    assert (code, err) == (0, "")
    assert "fine-tuning changed no head's type" in out  # the model before fine-tuning, read again

    a, b = checkpoint(tmp_path / "straight"), checkpoint(tmp_path / "stopped")
    assert a["step"] == b["step"] == 6
    for part in ("model", "optimizer", "rng", "model_config", "tokenizer"):
        assert same_tensors(a[part], b[part]), part
    assert a["best_val_loss"] == b["best_val_loss"]
    assert b["train_config"]["init_from"] == init_from and b["model_config"]["block_size"] == 32


def test_the_checkpoint_of_a_fine_tune_is_an_ordinary_one(tmp_path):
    """It records what the model needs (query/key/value biases, GPT-2's GELU, its whole vocabulary), and reads
    back as the model that was trained; sample.py samples from it."""
    init_from = hugging_face(tmp_path)
    assert train(tmp_path, f"--init_from={init_from}")[0] == 0
    loaded = load_model(tmp_path / "out", CPU)
    config = loaded.model.config
    assert (config.qkv_bias, config.activation, config.vocab_size) == (True, "gelu_tanh", 50257)
    assert isinstance(loaded.tokenizer, FullGPT2Tokenizer)
    code, out, err = run(
        "sample", [f"--out_dir={tmp_path / 'out'}", "--prompt=the dog", "--max_new_tokens=5", "--device=cpu"]
    )
    assert code == 0 and out.startswith("the dog"), err


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_gptwatch_checkpoint_starts_a_new_run_from_its_weights(dropout, tmp_path):
    """Its weights as they are, with the run's own dropout."""
    init_from = gptwatch_with_a_sink_head(tmp_path)
    trainer = trainer_for(tmp_path, f"--init_from={init_from}", f"--dropout={dropout}")
    source = load_model(init_from, CPU).model.state_dict()
    assert trainer.state.step == 0 and same_tensors(trainer.model.state_dict(), source)
    assert trainer.model.config.dropout == trainer.model.drop.p == trainer.model.blocks[0].attn.dropout == dropout
    assert trainer.model.lm_head.weight is trainer.model.wte.weight
    assert trainer.model_before_fine_tuning() is trainer.model


@pytest.mark.parametrize("resume", [["--resume"], ["--init_from=resume"]])
@pytest.mark.parametrize("fine_tune", [False, True])
def test_init_from_resume_is_resume(resume, fine_tune, tmp_path):
    """`--init_from=resume` continues as `--resume` does, to the parameters of a run that never stopped; a resumed
    fine-tune (of a Hugging Face model here) needs neither its model again nor init_from, and records the model it
    started from."""
    init_from = [f"--init_from={hugging_face(tmp_path)}"] if fine_tune else []
    fit(tmp_path, *init_from, *SCHEDULE, "--max_iters=3", f"--out_dir={tmp_path / 'a'}")
    fit(tmp_path, *resume, *SCHEDULE, f"--out_dir={tmp_path / 'a'}")
    fit(tmp_path, *init_from, *SCHEDULE, f"--out_dir={tmp_path / 'b'}")
    a, b = checkpoint(tmp_path / "a"), checkpoint(tmp_path / "b")
    assert a["step"] == b["step"] == 6
    assert same_tensors(a["model"], b["model"]) and same_tensors(a["optimizer"], b["optimizer"])
    assert a["train_config"]["init_from"] == b["train_config"]["init_from"]


# --- the model decides ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, words",
    [
        (["--n_layer=2"], "config key 'n_layer' is 2 but the model {} has 1"),
        (["--arch=modern"], "config key 'arch' is 'modern' but the model {} has 'gpt2'"),
        (
            ["--tokenizer=gpt2"],
            "config key 'tokenizer' is 'gpt2' but the model {} reads text with its own char vocabulary",
        ),
        (["n_embd = 32\n"], "config key 'n_embd' is 32 but the model {} has 16"),
    ],
)
def test_model_keys_that_disagree_with_the_model_are_refused_naming_both(given, words, tmp_path):
    init_from = gptwatch_with_a_sink_head(tmp_path)
    args = tiny_args(tmp_path, f"--init_from={init_from}")
    if given[0].endswith("\n"):  # set in the config file
        Path(args[0]).write_text(given[0])
        args = [a for a in args if not a.startswith("--n_embd")]
    else:
        args += given
    code, _, err = run("train", args)
    assert code == 2 and words.format(init_from) in one_line(err)
    assert written(tmp_path) == []


def trainer_for(root: Path, *args: str, without: str = ""):
    """The Trainer train.py would run with tiny_args and `args`, leaving out the tiny arguments that start with
    `without`."""
    from bench.harness import load_config
    from trainer import runtime
    from trainer.start import starting_from
    from trainer.trainer import Trainer

    argv = [a for a in tiny_args(root, *args) if not (without and a.startswith(without))]
    cfg = load_config(argv[0], argv[1:])
    return Trainer.from_start(starting_from(cfg).prepared(), runtime.setup(cfg))


def test_a_smaller_block_size_crops_the_models_positions_and_none_takes_them_all(tmp_path):
    init_from = hugging_face(tmp_path)
    cropped = trainer_for(tmp_path, f"--init_from={init_from}", "--block_size=16")
    assert cropped.cfg.model.block_size == cropped.model.config.block_size == 16
    assert cropped.model.wpe.weight.shape == (16, 16) and cropped.model.wpe.weight.requires_grad
    whole = trainer_for(tmp_path, f"--init_from={init_from}", "--val_fraction=0.2", without="--block_size")
    assert whole.cfg.model.block_size == whole.model.config.block_size == 64
    code, _, err = train(tmp_path, f"--init_from={init_from}", "--block_size=65", f"--out_dir={tmp_path / 'no'}")
    assert code == 2 and "use --block_size=64 or less" in one_line(err)


def test_characters_a_char_model_never_had_are_refused_by_name(tmp_path):
    shakespeare = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    init_from = nanogpt_char(tmp_path, shakespeare)
    code, _, err = train(tmp_path, f"--init_from={init_from}")
    message = one_line(err)
    assert code == 1 and f"the model {init_from} never had: '0', '1', '2', '4', '5'" in message
    assert written(tmp_path) == []


def test_data_is_prepared_with_the_models_vocabulary_and_cached_apart(tmp_path):
    """The char model's vocabulary (in its order, with characters the text lacks) is not the one the text builds:
    each has its own prepared folder."""
    init_from = nanogpt_char(tmp_path, CHARS[::-1] + "XYZ")
    assert train(tmp_path, f"--init_from={init_from}")[0] == 0
    assert train(tmp_path, f"--out_dir={tmp_path / 'scratch'}", "--run_name=scratch")[0] == 0
    folders = sorted(p.name for p in (tmp_path / "prep").iterdir())
    assert len(folders) == 2 and any(re.match(r"corpus-char-[0-9a-f]{8}-", name) for name in folders)
    assert checkpoint(tmp_path / "out")["tokenizer"]["chars"] == CHARS[::-1] + "XYZ"


# --- the watch: the model before fine-tuning --------------------------------------------------------------------


def test_the_report_sets_each_head_beside_the_model_before_fine_tuning(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    init_from = gptwatch_with_a_sink_head(tmp_path)
    code, out, err = train(tmp_path, f"--init_from={init_from}", '--watch_sentences=["the dog saw the ball"]')
    assert (code, err) == (0, "")
    report = out.split("what fine-tuning changed:")[1]
    assert re.search(r"L0H0\s+first-token \(sink\)\s+first-token \(sink\)\s+.*\b1\.00 -> 1\.00", report)
    assert "fine-tuning changed no head's type (1 of 2 heads have one)" in report
    assert "step 3: fine-tuning changed no head's type" in out  # at each evaluation too
    events = EventAccumulator(str(tmp_path / "runs" / "t")).Reload()
    head_run = EventAccumulator(str(tmp_path / "runs" / "t" / "L0H0")).Reload()  # L0H0's own run
    assert "before_fine_tuning/sink/L0" in head_run.Tags()["scalars"]
    assert "heads/before_fine_tuning/text_summary" in events.Tags()["tensors"]
    assert '"L0H0":"first-token (sink)"' in (tmp_path / "out" / "attention.html").read_text()


def test_a_run_from_scratch_has_no_second_baseline(tmp_path):
    code, out, _ = train(tmp_path)
    assert code == 0 and "fine-tuning" not in out


def test_the_heads_whose_type_fine_tuning_changed_are_named_marked_and_labelled():
    now, before, untrained = hand_results(), hand_results(), hand_results()
    for name in untrained.heads:
        untrained.heads[name] = torch.full_like(untrained.heads[name], 0.05)
    before.heads["sink"][0, 3] = 0.05  # L0H3 was no sink before fine-tuning
    before.heads["previous_token"][0, 6] = 0.9  # L0H6 (uniform now) was a previous-token head
    base = interpret(untrained)
    now = interpret(now, base, before=interpret(before, base))
    assert changed_heads(now) == ["L0H3", "L0H6"]
    assert changes_line(now) == (
        "fine-tuning changed the type of 2 of 7 heads: L0H3 - -> first-token (sink), L0H6 previous-token -> -"
    )
    table = before_table(now).splitlines()
    assert len(table) == 2 + 7 and table[0].split()[:5] == ["head", "before", "fine-tuning", "now", "previous-token"]
    starred = [line.split()[1] for line in table[2:] if line.startswith("*")]
    assert starred == ["L0H3", "L0H6"]
    labels = type_labels(now)
    assert labels["L0H3"] == "first-token (sink) (before fine-tuning: -)" and labels["L0H0"] == "previous-token"


def test_resuming_compares_the_settings_a_model_from_elsewhere_brings(trained):
    """A checkpoint whose model computes GPT-2's tanh GELU is no checkpoint a run from scratch can continue, though
    every tensor has the shape it expects."""
    from bench.harness import load_config
    from trainer.start import check_resume_compatible

    saved = torch.load(trained.char, weights_only=True)
    cfg = load_config(None, ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=32", "--resume"])
    ours = GPTConfig(**saved["model_config"])
    check_resume_compatible(cfg, saved, saved["tokenizer"], ours)
    saved["model_config"]["activation"] = "gelu_tanh"
    with pytest.raises(UsageError, match="the model's activation is 'gelu' \\(the checkpoint's: 'gelu_tanh'"):
        check_resume_compatible(cfg, saved, saved["tokenizer"], ours)
