"""Train a GPT and watch its attention.

    python train.py [CONFIG.toml] [--key=value ...]
    torchrun --nproc_per_node=N train.py [CONFIG.toml] [--key=value ...]

With no CONFIG, configs/pronouns.toml runs: the pronoun demo; with --dataset naming a text of your own, settings
chosen for that text (`trainer/start.py`); with --init_from naming a model to fine-tune, the built-in defaults.
`--help` lists every key and says which base applies when. Progress goes to the terminal and to TensorBoard under
log_dir/run_name; the checkpoint to out_dir/ckpt.pt.

This file is the command line around `trainer.Trainer`, which holds the training step and its loop, and what a
run shows, given to the trainer as callbacks: the terminal and TensorBoard's scalars (`TrainingLog`), a text
sample (`TextSample`) and the attention (`watch.callback`).
"""

from __future__ import annotations

from common import cli, cores

if __name__ == "__main__":  # before the imports below, so a Ctrl-C while torch loads is one line
    cli.report_interrupts_while_starting()
    cores.look_before_torch_loads()  # OpenMP reads how its threads wait once, as torch loads

# isort: split
import os
import shlex
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from common.cli import duration, for_terminal, markdown_literal, run_cli, say
from common.errors import warn
from common.files import inside_name
from common.settings import TrainConfig
from data.tokenizer import Tokenizer, TokenizerError, known_token
from model.gpt import evaluating
from model.memory import parameter_count
from trainer import runtime
from trainer.start import Start, resolve
from trainer.trainer import Callback, Evaluation, FitResult, StepResult, Trainer
from watch.show.tensorboard import log_hparams, log_losses, log_step, tensorboard_command

INTERRUPTED = "interrupted; the last checkpoint saved, if any, is intact"  # a Ctrl-C that reaches `run_cli`
BASES = (
    "With no CONFIG.toml: configs/pronouns.toml (the demo), unless --dataset names real text (a file, or "
    "shakespeare, tinystories, tinystories_lower): then settings chosen for that text, scaled to its size and to "
    "a few minutes on a laptop CPU, and printed in one line at the start (resumed: the model's shape and "
    "tokenizer from the checkpoint). With a CONFIG.toml, that file alone."
)


def main(argv: list[str]) -> int:
    start = resolve(argv, BASES)  # --help prints and exits here
    cfg = start.cfg
    # Until training takes the signals over, SIGTERM and SIGHUP unwind like Ctrl-C (cli.run_cli), so data
    # preparation cleans up its half-written files.
    rt = runtime.setup(cfg)
    try:
        if rt.is_main and start.line():
            say(start.line())
        # One run per out_dir: the processes of one torchrun job share it, and rank 0 speaks for them.
        with runtime.RunLock(cfg.out_dir) if rt.is_main else nullcontext() as lock:
            return train(start, rt, argv, lock)
    finally:
        runtime.teardown(rt)


def train(start: Start, rt: runtime.Runtime, argv: list[str], lock: runtime.RunLock | None = None) -> int:
    """Trains the run `start` says; `lock` holds out_dir (rank 0), checked before every save."""
    cfg = start.cfg
    # A run folder that is not this run's is refused now, before preparing data and building the model; TensorBoard
    # takes it later, when the run has a name (a default one is new), under its lock (`fit_watched`).
    # A resume continues its TensorBoard run; a folder from before runs recorded their out_dir in it is the resumed
    # run's when the checkpoint records its name.
    resumed = start.checkpoint or {}
    name = cfg.run_name or resumed.get("run_name")
    recorded = bool(resumed) and name == resumed.get("run_name")
    if rt.is_main and isinstance(name, str) and name and inside_name(name) is None:
        runtime.check_run_folder(Path(cfg.log_dir) / name, Path(cfg.log_dir), resumed.get("run_id"), recorded=recorded)
    with runtime.out_of_memory(cfg):
        start = start.prepared(quiet=not rt.is_main)
        trainer = Trainer.from_start(start, rt, guard=lock.check if lock is not None else None)
        if trainer.state.step >= cfg.max_iters:
            say(
                f"checkpoint is already at step {trainer.state.step} >= max_iters={cfg.max_iters}; "
                f"raise --max_iters above {trainer.state.step} to train further, e.g. "
                f"--max_iters={2 * trainer.state.step}"
            )
            return 0
        # the other processes train silently: the first speaks for them
        result = fit_watched(trainer, argv, lock, recorded=recorded) if rt.is_main else trainer.fit()
    return 0 if result.completed else 128 + result.stopped_by


def fit_watched(
    trainer: Trainer, argv: list[str], lock: runtime.RunLock | None, *, recorded: bool = False
) -> FitResult:
    """`trainer.fit()` with what a run shows: the terminal, TensorBoard (its own run folder, held as out_dir is:
    `lock`, and holding no other run's logs: `runtime.claim_run_folder`, `recorded` its say; the folder learns when
    the run first saves) and the attention watch; then the HParams and the run's last lines."""
    from data.corpora import corpus_of
    from watch.callback import AttentionWatch
    from watch.show.tensorboard import TensorBoardWriter

    cfg = trainer.cfg
    # One run per TensorBoard run folder too (unless it is out_dir itself, locked already). A lock there left
    # by a killed run is taken over quietly: the out_dir lock it left says so already.
    folder = Path(cfg.log_dir) / trainer.state.run_name
    same = lock is not None and folder.resolve() == Path(cfg.out_dir).resolve()
    with (
        runtime.RunLock(folder, key="log_dir", what="the TensorBoard run", option="--run_name", say_takeover=False)
        if not same
        else nullcontext()
    ):
        saved = trainer.checkpoints is not None and trainer.checkpoints.saved_step is not None
        claim = runtime.claim_run_folder(
            folder, Path(cfg.log_dir), trainer.state.run_id, recorded=recorded, saved=saved
        )
        # The run's own folder: its heads apart from any other training's (--logdir of log_dir compares runs).
        say("TensorBoard: " + tensorboard_command(folder))
        writer = TensorBoardWriter(folder)  # its lock checked it writable
        try:
            corpus = corpus_of(cfg.dataset)  # probe files: --probes/--agreement, or the corpus's own
            probes = cfg.probes or trainer.data.probes_path or (corpus and corpus.probes_path) or None
            agreement = cfg.agreement or (corpus and corpus.agreement_path) or None
            watch = AttentionWatch(
                writer,
                cfg.watch_sentences,
                probes,
                agreement,
                page=Path(cfg.out_dir) / "attention.html",
                ablation=cfg.ablation,
                paths=cfg.watch_paths,
            )
            sample = TextSample(
                writer,
                trainer.tokenizer,
                cfg.sample_prompt,
                cfg.sample_tokens,
                cfg.seed,
                chosen="sample_prompt" in cfg.given,
            )
            trainer.callbacks = [claim, TrainingLog(writer), sample, watch]
            result = trainer.fit()
            log_hparams(writer, trainer.cfg, result)  # the trainer's settings: a fine-tune's model keys are its model's
        finally:
            writer.close()  # keeps the TensorBoard events logged so far, also after an error
    report_end(cfg, result, argv, sample_prompt(watch.texts, trainer.tokenizer), folder)
    return result


def report_end(
    cfg: TrainConfig, result: FitResult, argv: list[str], prompt: str | None = None, run_folder: Path | None = None
) -> None:
    """The run's last lines: how to resume a stopped run, TensorBoard (the run's own folder, `run_folder`), the files
    written, and a sample command (with `prompt`, words this model knows). Every command here runs as printed
    (tests/test_hints.py), and every line goes through `cli.say`: a path or a prompt may hold what a terminal would act
    on."""
    if not result.completed and result.saved_step == result.step:  # else a warning said why it was not saved
        name = signal.Signals(result.stopped_by).name
        given = [a for a in argv if a.split("=")[0] != "--resume"]
        say("")
        say(
            f"{name}: saved step {result.step} to {Path(cfg.out_dir) / 'ckpt.pt'}; resume with: "
            f"{shlex.join(['python', 'train.py', *given, '--resume'])}"
        )
    say("open TensorBoard: " + tensorboard_command(run_folder or cfg.log_dir))
    for what, path in result.files.items():
        say(f"{what}: {path} (open it in a browser; it needs no network)")
    command = ["python", "sample.py", f"--out_dir={cfg.out_dir}", *(["--prompt", prompt] if prompt else [])]
    say(f"sample: {shlex.join(command)}")


def sample_prompt(watched: list[str], tokenizer: Tokenizer) -> str | None:
    """A prompt this model can read, for the sample command: the start of the first sentence the watch read (the
    run's, or its choice from the held-out text) up to its last pronoun, else its first half, of printable
    characters only; None when none."""
    from watch.measure.probesets import PRONOUN_WORD

    for text in watched:
        pronouns = [m for m in PRONOUN_WORD.finditer(text) if len(text[: m.start()].split()) >= 2]
        words = text.split()
        prompt = text[: pronouns[-1].end()] if pronouns else " ".join(words[: max(1, len(words) // 2)])
        if for_terminal(prompt) != prompt:  # a command shown with escapes would not run as printed
            continue
        try:
            if tokenizer.encode(prompt):
                return prompt
        except TokenizerError:
            continue
    return None


# --- what a run shows ---------------------------------------------------------------------------------------


class TrainingLog(Callback):
    """The terminal: the model and device at the start, how long the run will take on this machine, progress with
    loss, learning rate and tokens/s (a bar on a terminal, a plain line every tenth of the run otherwise), every
    evaluation's losses, a summary at the end; and the same figures in TensorBoard's Scalars (`log_step`,
    `log_losses`). `writer` is a `SummaryWriter` (or anything with its `add_scalar`/`flush`); `out` is where the
    progress goes (stdout, so stderr carries only problems)."""

    def __init__(self, writer: Any, out: Any = None) -> None:
        self.writer = writer
        self.out = out if out is not None else sys.stdout
        self.bar: tqdm | None = None
        self._flush_pending = False  # an evaluation's logs (from every callback) reach disk at the next step
        self._last_line: dict[str, str] = {}  # the latest loss, lr and tokens/s logged (the bar's figures)

    def on_fit_start(self, trainer: Trainer) -> None:
        cfg, rt, m = trainer.cfg, trainer.runtime, trainer.model.config
        # Parameters without the positions, as GPT-2 counts its own.
        say(
            f"model: {parameter_count(m, positions=False) / 1e6:.2f}M parameters ({m.options()}, {m.n_layer} layers "
            f"x {m.n_head} heads x {m.n_embd} dims, block {cfg.model.block_size}); vocabulary {m.vocab_size}",
            file=self.out,
        )
        processes = f" x {rt.world_size} processes" if rt.distributed else ""
        threads = torch.get_num_threads()
        say(
            f"device: {rt.device}{processes}, {trainer.tokens_per_step:,} tokens per step, "
            f"{threads} CPU thread{'s' if threads > 1 else ''}{rt.threads_note}",
            file=self.out,
        )
        # A bar only where someone watches it redrawn: in a file or a pipe each redraw would be kept, kilobytes of them.
        if self.out.isatty():
            self.bar = tqdm(
                total=cfg.max_iters,
                initial=trainer.state.step,
                dynamic_ncols=True,
                desc="train",
                mininterval=0.5,
                file=self.out,
            )
        # How long the run will take, and the tokens since the last logged step: from the first step on.
        self._clock = RunClock(trainer.state.step, cfg)
        self._last_log, self._tokens_since_log = time.perf_counter(), 0

    def on_step(self, trainer: Trainer, result: StepResult) -> None:
        if self._flush_pending:
            self.writer.flush()
            self._flush_pending = False
        self._tokens_since_log += trainer.tokens_per_step
        if result.step % trainer.cfg.log_interval == 0 or result.step == trainer.cfg.max_iters:
            now = time.perf_counter()
            tokens_per_sec = self._tokens_since_log / (now - self._last_log)
            self._last_log, self._tokens_since_log = now, 0
            self._last_line = {
                "loss": f"{result.loss:.4f}",
                "lr": f"{result.lr:.2e}",
                "tok_s": f"{tokens_per_sec:,.0f}",
            }
            if self.bar is not None:
                self.bar.set_postfix(self._last_line)
            log_step(self.writer, result.step, result.loss, result.lr, result.grad_norm, tokens_per_sec)
        estimate = self._clock.stepped(result.step)
        if estimate is not None:
            self._say(estimate)
        if self.bar is not None:
            self.bar.update(1)
        elif self._clock.is_tenth(result.step):
            speed = f", {self._last_line['tok_s']} tokens/s" if self._last_line else ""
            self._say(
                f"step {result.step}/{trainer.cfg.max_iters}: loss {result.loss:.4f}, lr {result.lr:.2e}{speed}"
                f"{self._clock.left(result.step)}"
            )

    def _say(self, line: str) -> None:
        """A line above the bar (tqdm clears it, writes the line and draws it again), or a line."""
        if self.bar is not None:
            self.bar.write(line, file=self.out)
        else:
            print(line, file=self.out, flush=True)

    def on_evaluate(self, trainer: Trainer, evaluation: Evaluation) -> None:
        self._say(f"step {evaluation.step}: train loss {evaluation.train_loss:.4f}, val loss {evaluation.val_loss:.4f}")
        log_losses(self.writer, evaluation.step, evaluation.val_loss, evaluation.train_loss)
        self._flush_pending = True

    def on_fit_end(self, trainer: Trainer, result: FitResult) -> None:
        self.on_exit(trainer)
        if result.ranks_agree is not None:
            print(f"parameters identical on all {trainer.runtime.world_size} processes: {result.ranks_agree}")
        tokens_per_sec = result.steps * trainer.tokens_per_step / max(result.seconds, 1e-9)
        where = trainer.checkpoints.path if result.saved_step == result.step else "(not saved)"
        say(
            f"done: {result.steps} steps in {result.seconds:.1f} s ({tokens_per_sec:,.0f} tokens/s overall), "
            f"best val loss {result.best_val_loss:.4f}, checkpoint {where}",
            file=self.out,
        )

    def on_exit(self, trainer: Trainer) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class RunClock:
    """How long a run will take on this machine, from the pace of its first steps (watch passes between them
    included) and what the evaluation at its start took; and whether the machine is busy, which slows every figure
    that was measured on an idle one."""

    def __init__(self, start_step: int, cfg: TrainConfig) -> None:
        self.start_step = start_step
        self.max_iters = cfg.max_iters
        self.eval_interval = cfg.eval_interval
        # Steps enough to take in a watch pass or two, and few enough that the estimate comes among the first lines.
        self.measure_steps = max(10, cfg.watch_interval + 1)
        self.started = time.perf_counter()
        self.first_step: float | None = None  # when the first step ended: an evaluation at the start comes before
        self.step_seconds: float | None = None
        self.evaluation_seconds = 0.0

    def stepped(self, step: int) -> str | None:
        """Notes step `step`'s end; once the first steps are timed, the estimate line (None before and after)."""
        now = time.perf_counter()
        if self.first_step is None:
            self.first_step = now
            return None
        done = step - self.start_step - 1  # steps timed since the first one ended
        if self.step_seconds is not None or done < self.measure_steps:
            return None
        self.step_seconds = (now - self.first_step) / done
        # The first step's time less one step's: the evaluation at the start (0 s for a resumed run without one).
        self.evaluation_seconds = max(0.0, self.first_step - self.started - self.step_seconds)
        evaluations = self._evaluations_left(step) if self.evaluation_seconds else 0
        took = f"{self.max_iters - step} steps at {1 / self.step_seconds:,.1f} a second" + (
            f" and {evaluations} evaluation{'s' if evaluations > 1 else ''}" if evaluations else ""
        )
        line = f"about {duration(self.seconds_left(step))} of training left here ({took}), then the report"
        return line + busy_machine()

    def seconds_left(self, step: int) -> float:
        return (self.max_iters - step) * self.step_seconds + self._evaluations_left(step) * self.evaluation_seconds

    def _evaluations_left(self, step: int) -> int:
        later = range(step + 1, self.max_iters + 1)
        return sum(1 for s in later if s % self.eval_interval == 0 or s == self.max_iters)

    def is_tenth(self, step: int) -> bool:
        """Whether `step` ends a tenth of the run (where a run without a bar prints a line)."""
        tenth = max(1, self.max_iters // 10)
        return step % tenth == 0 and step < self.max_iters

    def left(self, step: int) -> str:
        """ ", about 89 s left", at the pace of every step so far (a machine that got busier since the estimate
        slows it); "" before the first estimate."""
        if self.step_seconds is None or self.first_step is None:
            return ""
        self.step_seconds = (time.perf_counter() - self.first_step) / max(1, step - self.start_step - 1)
        return f", about {duration(self.seconds_left(step))} left"


BUSY = 1.5  # the load average per CPU core above which the machine counts as busy


def busy_machine() -> str:
    """ "; this machine is busy (load average 7.7 on 2 cores): ..." when other programs want more of the CPUs than
    there are, which slows every step; "" otherwise, or where the load average cannot be read (Windows)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    cores = os.cpu_count() or 1
    if load <= BUSY * cores:
        return ""
    return (
        f"; this machine is busy (load average {load:.1f} on {cores} cores): other programs share its CPUs, so this "
        f"takes longer than on an idle machine"
    )


class TextSample(Callback):
    """A short sample of generated text in TensorBoard's Text tab at every evaluation."""

    def __init__(
        self, writer: Any, tokenizer: Tokenizer, prompt: str, max_new_tokens: int, seed: int, *, chosen: bool = True
    ) -> None:
        """`chosen`: the user set `prompt`; a default this model cannot read is replaced without a warning, by a
        token it knows (a space, end-of-text, or its first character), as sample.py does."""
        self.writer = writer
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.tokenizer = tokenizer
        self.prompt_ids: list[int] = []
        if not max_new_tokens:  # no sample asked for: nothing to warn about
            return
        try:
            self.prompt_ids = tokenizer.encode(prompt)
        except TokenizerError as exc:
            if not chosen:
                self.prompt_ids = known_token(tokenizer)
                return
            warn(f"no text sample will be logged: sample_prompt {prompt[:40]!r} cannot be encoded ({exc})")
        else:
            if not self.prompt_ids:
                warn("no text sample will be logged: sample_prompt is empty; set --sample_prompt to some text")

    def on_evaluate(self, trainer: Trainer, evaluation: Evaluation) -> None:
        if not self.prompt_ids:  # none asked for, or none that can be encoded
            return
        model = trainer.model
        device = next(model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(self.seed)
        with evaluating(model):
            out = model.generate(
                torch.tensor([self.prompt_ids], device=device),
                self.max_new_tokens,
                temperature=0.8,
                top_k=200,
                generator=generator,
            )
        # A code block keeps the text as generated (Markdown would join its lines), and shows any markup in it.
        self.writer.add_text("sample", markdown_literal(self.tokenizer.decode(out[0].tolist())), evaluation.step)


if __name__ == "__main__":
    # A closed pipe or terminal (`python train.py | head -1`, an ssh drop) must not stop a run that can go on.
    sys.exit(run_cli(main, sys.argv[1:], survive_closed_output=True, interrupted=INTERRUPTED))
