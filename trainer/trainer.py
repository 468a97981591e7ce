"""One training run, in one place: `step()` (one optimizer step over `grad_accum` micro-batches, with the checks
that stop a diverging run), `evaluate()` (the mean loss on both splits), and `fit()`, the loop around them, which
evaluates every `eval_interval` steps and checkpoints when val improves (and every `ckpt_interval` steps, on a stop
signal, and at the end) through `CheckpointWriter` (the format is formats/checkpoint.py's). What a run shows plugs
in as callbacks: objects with some of the hooks of `Callback`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from common.cli import handling, stop_signals
from common.errors import UserError, warn
from common.files import remove_dead_leftovers, writable_folder
from common.settings import TrainConfig
from data.batches import Batches
from data.prepare import Prepared
from formats.checkpoint import CHECKPOINT, CHECKPOINT_FILE, Checkpoint, previous_path, save_checkpoint
from formats.sources import identify, load_model
from model.gpt import GPT, evaluating
from trainer.optim import divergence_fix, lr_at, make_optimizer, schedule_problem, set_lr
from trainer.runtime import Runtime, check_training_fits, default_run_name, new_run_id, ranks_agree
from trainer.start import Start, data_identity


@dataclass
class StepResult:
    step: int  # optimizer steps done, this one included
    loss: float  # mean training loss over the step's micro-batches
    lr: float
    grad_norm: float | None  # before clipping; None when grad_clip = 0


@dataclass
class Evaluation:
    step: int
    train_loss: float
    val_loss: float
    seconds: float  # since fit() began


@dataclass
class FitResult:
    start_step: int
    step: int = 0
    seconds: float = 0.0
    best_val_loss: float = math.inf
    evaluations: list[Evaluation] = field(default_factory=list)
    stopped_by: int | None = None  # the signal that stopped the run early, if one did
    saved_step: int | None = None  # the step of this run's checkpoint on disk, if it saved one
    ranks_agree: bool | None = None  # with several processes: are their parameters identical?
    metrics: dict[str, float] = field(default_factory=dict)  # final numbers callbacks add, for hparams
    files: dict[str, Path] = field(default_factory=dict)  # what callbacks wrote at the end, e.g. {"page": path}

    @property
    def steps(self) -> int:
        return self.step - self.start_step

    @property
    def completed(self) -> bool:
        return self.stopped_by is None


class Callback:
    """The hooks a Trainer calls, each a no-op here. Subclass and override what you need, or
    give any object methods of these names (watch/'s callback does, so it needs no trainer)."""

    def on_fit_start(self, trainer: Trainer) -> None: ...
    def on_step(self, trainer: Trainer, result: StepResult) -> None: ...
    def on_evaluate(self, trainer: Trainer, evaluation: Evaluation) -> None: ...
    def on_watch(self, trainer: Trainer, step: int) -> None: ...  # every watch_interval steps between evaluations
    def on_save(self, trainer: Trainer) -> None: ...  # before each checkpoint is written
    def on_fit_end(self, trainer: Trainer, result: FitResult) -> None: ...  # completed, or stopped by a signal
    def on_exit(self, trainer: Trainer) -> None: ...  # always last, also when fit() raises


@dataclass
class TrainState:
    """Where a run stands; all of it goes into the checkpoint, under the names of its fields."""

    run_name: str
    step: int = 0
    best_val_loss: float = math.inf
    eval_step: int | None = None  # step of the last evaluation: a resumed run does not repeat it
    run_id: str | None = None  # new for a new run; a resumed run's is its checkpoint's (None in older ones)


class CheckpointWriter:
    """A run's saves to `path`. Made before the run starts, it finds now, not at the first save, what would keep
    it from writing there (or to ckpt.prev.pt: anything but a checkpoint, `CHECKPOINT_FILE`), and removes temporary
    files of a killed save. The first save of a run that did not `resume` keeps the checkpoint it replaces (an
    earlier run's) as ckpt.prev.pt, so a new run never silently destroys the last one; only at that first save, so a
    run that fails before saving leaves everything in place. A run stopped (Ctrl-C, SIGTERM, SIGHUP) before that
    first save is saved only where that pushes no earlier run out (nothing stands at ckpt.prev.pt), so restarts
    interrupted one after another never lose a trained run; otherwise it says what stays where. `guard`, when
    given, raises before a save when this run may no longer write there (`RunLock.check`)."""

    def __init__(self, path: Path, *, resume: bool, guard: Callable[[], None] | None = None) -> None:
        self.path = path
        self.keep_previous = not resume and path.is_file()  # looked at once: preparing data can take minutes
        self.saved_step: int | None = None  # step of the checkpoint on disk from this run (or the one resumed)
        self.guard = guard
        writable_folder(path.parent, "out_dir")
        CHECKPOINT_FILE.check(path, "choose another --out_dir", "this run's checkpoint")
        if self.keep_previous:  # it replaces only a checkpoint: found now, not at the first save
            CHECKPOINT_FILE.check(previous_path(path), "choose another --out_dir", "the earlier run's checkpoint")
        remove_dead_leftovers(path)

    def skips_stopped(self, step: int) -> bool:
        """Whether the last save of a run a stop signal ended, at `step`, is skipped (and says so): it would push an
        earlier run out of ckpt.prev.pt. Asked before anything of the save is done, the run folder's record too."""
        previous = previous_path(self.path)
        if not (self.keep_previous and os.path.lexists(previous)):
            return False
        warn(
            f"stopped at step {step}, before this run's first checkpoint: not saved, so that the earlier runs' "
            f"{self.path} and {previous} stay as they were"
        )
        return True

    def save(self, checkpoint: Checkpoint, step: int) -> None:
        """Saves `checkpoint` of `step`."""
        if self.guard is not None:
            self.guard()
        previous = previous_path(self.path) if self.keep_previous else None
        save_checkpoint(self.path, checkpoint, keep_previous=previous)
        if previous is not None:
            self.keep_previous = False
            warn(f"{self.path} held an earlier run (this one has no --resume); kept it as {previous}")
        self.saved_step = step


class Trainer:
    def __init__(
        self,
        cfg: TrainConfig,
        runtime: Runtime,
        model: GPT,
        optimizer: Any,
        batches: Any,
        *,
        data: Prepared | None = None,
        state: TrainState | None = None,
        checkpoints: CheckpointWriter | None = None,
    ) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.model = model  # the plain GPT: what is saved and watched
        self.optimizer = optimizer
        self.batches = batches
        self.data = data  # the prepared corpus (None for a benchmark's random tokens)
        self.tokenizer = data.tokenizer if data is not None else None
        self.state = state or TrainState(run_name=cfg.run_name or "run")
        self.checkpoints = checkpoints  # None: this process does not save (not rank 0, or a benchmark)
        self.callbacks: list[Any] = []  # what a run shows: set by its caller (train.py)
        # What the steps run: compiled and wrapped for several processes when asked.
        self.train_model: Any = torch.compile(model) if cfg.compile else model
        if runtime.distributed:
            ids = [runtime.local_rank] if runtime.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.train_model, device_ids=ids)
        self.accum_per_rank = cfg.grad_accum // runtime.world_size
        self._unsaved: tuple[int, float] | None = None  # (first step, worst loss) of saves skipped as not sane
        self.tokens_per_step = cfg.batch_size * cfg.model.block_size * cfg.grad_accum

    @classmethod
    def from_start(cls, start: Start, runtime: Runtime, *, guard: Callable[[], None] | None = None) -> Trainer:
        """The run `start` says (`trainer.start.resolve`, its data `prepared`): its model (new, fine-tuned, or resumed
        with the optimizer's state and the random generators of the run it continues) and optimizer, on `runtime`'s
        device, and its batches. `guard`: its `CheckpointWriter`'s."""
        cfg, data = start.cfg, start.data
        torch.manual_seed(cfg.seed + runtime.rank)
        path = Path(cfg.out_dir) / CHECKPOINT
        checkpoints = CheckpointWriter(path, resume=cfg.resume, guard=guard) if runtime.is_main else None
        model_cfg = start.model_config(data.tokenizer.vocab_size)
        # the weights of a model read to fine-tune are in memory already, on the CPU where they were read
        read = start.model is not None and runtime.device.type == "cpu"
        held = sum(p.numel() * p.element_size() for p in start.model.parameters()) if read else 0
        check_training_fits(cfg, model_cfg.vocab_size, runtime.device, held=held)
        block = cfg.model.block_size
        batches = Batches(data.splits(block), block, cfg.batch_size, runtime.device, cfg.seed, runtime.rank)
        model = (start.model if start.model is not None else GPT(model_cfg)).to(runtime.device)
        optimizer = make_optimizer(model, cfg, runtime.device)
        state = TrainState(run_name=cfg.run_name or default_run_name(start.name), run_id=new_run_id())
        resumed = start.checkpoint
        if resumed is not None:  # `resolve` checked that it holds a run_name, step and best_val_loss
            start.resume(path, model, optimizer, batches)
            state = TrainState(
                cfg.run_name or resumed["run_name"],
                resumed["step"],
                resumed["best_val_loss"],
                eval_step=resumed.get("eval_step", resumed["step"]),
                run_id=resumed.get("run_id"),
            )
        if checkpoints is not None:
            checkpoints.saved_step = state.step if resumed is not None else None
            problem = schedule_problem(cfg, state.step)
            if problem is not None:
                warn(problem)
        return cls(cfg, runtime, model, optimizer, batches, data=data, state=state, checkpoints=checkpoints)

    def model_before_fine_tuning(self) -> GPT | None:
        """The model this run fine-tunes as it was before any step, for the watch's second baseline; None for a run
        from scratch. A resumed fine-tune reads it again from init_from; where that cannot be read now (the hub
        offline, a folder moved), None, with a warning saying so."""
        if not self.cfg.fine_tunes:
            return None
        if self.state.step == 0:
            return self.model
        try:
            with torch.random.fork_rng(devices=[]):  # reading a gptwatch checkpoint builds a model from the seed
                return load_model(
                    identify(self.cfg.init_from), self.runtime.device, block_size=self.model.config.block_size
                ).model
        except UserError as exc:
            warn(f"the model before fine-tuning cannot be read again, so the head types are shown without it: {exc}")
            return None

    def step(self) -> StepResult:
        """One optimizer step over grad_accum micro-batches (summed over all processes)."""
        cfg, rt = self.cfg, self.runtime
        lr = lr_at(self.state.step, cfg)
        set_lr(self.optimizer, lr)
        loss_sum = torch.zeros((), device=rt.device)
        for micro in range(self.accum_per_rank):
            x, y = self.batches.train()
            # Gradients sync across processes only on the last micro-batch.
            last = micro == self.accum_per_rank - 1
            sync = self.train_model.no_sync() if rt.distributed and not last else nullcontext()
            with sync, rt.autocast():
                _, loss = self.train_model(x, y)
                loss = loss / self.accum_per_rank
            loss.backward()
            loss_sum += loss.detach()
        mean_loss = loss_sum.item()  # read once: the check and the result share one wait for the device
        if not math.isfinite(mean_loss):
            raise self._diverged("the loss", mean_loss)
        grad_norm = None
        if cfg.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.train_model.parameters(), cfg.grad_clip).item()
            if not math.isfinite(grad_norm):
                raise self._diverged("the gradient norm", grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        return StepResult(self.state.step, mean_loss, lr, grad_norm)

    def evaluate(self) -> dict[str, float]:
        """Mean loss over eval_iters batches of each split; the same batches at every evaluation."""
        return {split: self.mean_loss(self.train_model, split, self.cfg.eval_iters) for split in ("train", "val")}

    def mean_loss(self, model: Any, split: str, batches: int) -> float:
        """The mean loss of `model` in eval mode on the first `batches` evaluation batches of `split` (the same
        batches every time; drawing them touches no generator that training uses)."""
        total = 0.0
        with evaluating(model):
            for x, y in self.batches.eval_batches(split, batches):
                with self.runtime.autocast():
                    _, loss = model(x, y)
                total += loss.item()
        return total / batches

    def fit(self) -> FitResult:
        """Trains to max_iters, or until Ctrl-C / SIGTERM (then saves and stops)."""
        result = FitResult(start_step=self.state.step)
        started = time.perf_counter()
        try:
            self._emit("on_fit_start", self)
            self.train_model.train()
            received: list[int] = []

            def stop(signum, frame) -> None:  # finish the current step, save, stop; a second signal stops at once
                if received:
                    raise KeyboardInterrupt
                received.append(signum)

            with handling(stop, stop_signals()):  # Ctrl-C, SIGTERM or SIGHUP
                result.stopped_by = self._loop(received, result, started)
            result.seconds = time.perf_counter() - started
            result.step, result.best_val_loss = self.state.step, self.state.best_val_loss
            self.save(final=True, stopped=result.stopped_by is not None)
            result.saved_step = self.checkpoints.saved_step if self.checkpoints is not None else None
            if self.runtime.distributed:
                result.ranks_agree = ranks_agree(self.model)
            self._emit("on_fit_end", self, result)
        finally:
            self._emit("on_exit", self)
        return result

    def _loop(self, received: list[int], result: FitResult, started: float) -> int | None:
        """Steps to max_iters (None), or until a stop signal arrives (that signal)."""
        cfg, state = self.cfg, self.state
        while True:
            if (state.step % cfg.eval_interval == 0 or state.step == cfg.max_iters) and state.step != state.eval_step:
                losses = self.evaluate()
                evaluation = Evaluation(state.step, losses["train"], losses["val"], time.perf_counter() - started)
                state.eval_step = state.step
                result.evaluations.append(evaluation)
                self._emit("on_evaluate", self, evaluation)
                if evaluation.val_loss < state.best_val_loss:
                    state.best_val_loss = evaluation.val_loss
                    if 0 < state.step < cfg.max_iters:  # at the end, fit() saves this same state next
                        self.save()
            elif cfg.watch_interval and state.step % cfg.watch_interval == 0 and state.step != state.eval_step:
                self._emit("on_watch", self, state.step)
            if state.step >= cfg.max_iters:
                return None
            self._emit("on_step", self, self.step())
            if cfg.ckpt_interval and state.step % cfg.ckpt_interval == 0:
                self.save()
            if received:
                return received[0]

    def save(self, *, final: bool = False, stopped: bool = False) -> None:
        """Writes out_dir/ckpt.pt atomically (rank 0 only), and only a state that has not diverged: never one
        whose weights are inf or nan (that stops the run), nor one whose loss has blown up. Such a save is skipped,
        so the checkpoint on disk stays the last sane state; at the end of fit (`final`) the run stops with an
        error instead. A run that comes back down says what was not saved. `stopped`: a stop signal ended the run
        (`CheckpointWriter.save`)."""
        if self.checkpoints is None or (stopped and self.checkpoints.skips_stopped(self.state.step)):
            return
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise self._diverged("a parameter", "inf or nan")
        loss = self.mean_loss(self.model, "train", 1)  # the weights as they are now, on one batch
        guess = math.log(self.model.config.vocab_size)  # the loss of guessing every token with equal probability
        # Any model starts near that loss and training lowers it; a state more than twice as bad has been thrown
        # off by too large a step, and resuming it would diverge at any learning rate.
        if not (math.isfinite(loss) and loss <= 2 * max(guess, 1.0)):
            if final:
                raise self._diverged("the loss", f"{loss:.4g} (more than twice the {guess:.3g} of guessing)")
            first, worst = self._unsaved or (self.state.step, loss)
            self._unsaved = (first, max(worst, loss) if math.isfinite(loss) else loss)
            return
        if self._unsaved is not None:
            first, worst = self._unsaved
            steps = f"step {first}" if first == self.state.step - 1 else f"steps {first} to {self.state.step - 1}"
            warn(
                f"checkpoints of {steps} were not saved: the loss had blown up to "
                f"{worst:.4g}, more than twice the {guess:.3g} of guessing; it is back at {loss:.4g} at step "
                f"{self.state.step}, saved now"
            )
            self._unsaved = None
        # Everything a resumed run needs to continue exactly, as plain tensors and values.
        checkpoint = Checkpoint(
            model=self.model.state_dict(),
            optimizer=self.optimizer.state_dict(),
            model_config=self.model.config.to_dict(),
            train_config=self.cfg.to_dict(),
            tokenizer=self.tokenizer.to_meta() if self.tokenizer is not None else None,
            rng={"torch": torch.get_rng_state(), "batches": self.batches.generator.get_state()},
            data=data_identity(self.cfg, self.data) if self.data is not None else None,
            **asdict(self.state),
        )
        self._emit("on_save", self)
        self.checkpoints.save(checkpoint, self.state.step)

    def _diverged(self, what: str, value: object) -> UserError:
        saved = self.checkpoints.saved_step if self.checkpoints is not None else None
        stopped = "before any checkpoint was saved; try"
        if saved is not None:
            path = self.checkpoints.path
            stopped = f"with {path} left at step {saved}, the last state whose loss was sane; resume from it with"
        return UserError(
            f"{what} became {value} at step {self.state.step}; training stopped {stopped} {divergence_fix(self.cfg)}"
        )

    def _emit(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(*args)
