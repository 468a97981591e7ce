"""What a run shows while it trains: the terminal, TensorBoard scalars, a text sample.

Each class is a callback for `Trainer` (see `trainer.trainer.Callback`). `train.py` gives
them to the main process only; the others train silently.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
from tqdm import tqdm

from cli import markdown_literal, warn
from data.tokenizer import Tokenizer, TokenizerError
from model.memory import parameter_count
from trainer.trainer import Callback, Evaluation, FitResult, StepResult, Trainer


class TrainingLog(Callback):
    """The terminal and TensorBoard's Scalars: the model and device at the start, a progress bar
    with loss, learning rate and tokens/s, every evaluation's losses, a summary at the end.
    `writer` is a `SummaryWriter` (or anything with its `add_scalar`/`flush`), or None."""

    def __init__(self, writer: Any | None = None) -> None:
        self.writer = writer
        self.bar: tqdm | None = None
        self._last_log = time.perf_counter()
        self._tokens_since_log = 0
        self._flush_pending = False  # an evaluation's logs (from every callback) reach disk at the next step

    def on_fit_start(self, trainer: Trainer) -> None:
        cfg, rt, model = trainer.cfg, trainer.runtime, trainer.model
        m = model.config   # parameters without the positions, as GPT-2 counts its own
        print(f"model: {parameter_count(m, positions=False) / 1e6:.2f}M parameters ({m.options()}, {m.n_layer} layers "
              f"x {m.n_head} heads x {m.n_embd} dims, block {cfg.model.block_size}); vocabulary {m.vocab_size}")
        processes = f" x {rt.world_size} processes" if rt.distributed else ""
        print(f"device: {rt.device}{processes}, {trainer.tokens_per_step:,} tokens per step, "
              f"{torch.get_num_threads()} CPU threads")
        # The bar goes to stdout with the other progress lines, so stderr carries only problems.
        self.bar = tqdm(total=cfg.max_iters, initial=trainer.state.step, dynamic_ncols=True, desc="train",
                        mininterval=0.5, file=sys.stdout)
        self._last_log, self._tokens_since_log = time.perf_counter(), 0

    def on_step(self, trainer: Trainer, result: StepResult) -> None:
        if self._flush_pending and self.writer is not None:
            self.writer.flush()
            self._flush_pending = False
        self._tokens_since_log += trainer.tokens_per_step
        if result.step % trainer.cfg.log_interval == 0 or result.step == trainer.cfg.max_iters:
            now = time.perf_counter()
            tokens_per_sec = self._tokens_since_log / (now - self._last_log)
            self._last_log, self._tokens_since_log = now, 0
            self.bar.set_postfix(loss=f"{result.loss:.4f}", lr=f"{result.lr:.2e}", tok_s=f"{tokens_per_sec:,.0f}")
            if self.writer is not None:
                self.writer.add_scalar("loss/train", result.loss, result.step)
                self.writer.add_scalar("lr", result.lr, result.step)
                if result.grad_norm is not None:
                    self.writer.add_scalar("grad_norm", result.grad_norm, result.step)
                self.writer.add_scalar("throughput/tokens_per_sec", tokens_per_sec, result.step)
        self.bar.update(1)

    def on_evaluate(self, trainer: Trainer, evaluation: Evaluation) -> None:
        line = f"step {evaluation.step}: train loss {evaluation.train_loss:.4f}, val loss {evaluation.val_loss:.4f}"
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line)
        if self.writer is not None:
            self.writer.add_scalar("loss/val", evaluation.val_loss, evaluation.step)
            self.writer.add_scalar("loss/train_eval", evaluation.train_loss, evaluation.step)
            self._flush_pending = True

    def on_fit_end(self, trainer: Trainer, result: FitResult) -> None:
        self._close_bar()
        if result.ranks_agree is not None:
            print(f"parameters identical on all {trainer.runtime.world_size} processes: {result.ranks_agree}")
        tokens_per_sec = result.steps * trainer.tokens_per_step / max(result.seconds, 1e-9)
        where = trainer.checkpoints.path if trainer.checkpoints is not None else "(not saved)"
        print(f"done: {result.steps} steps in {result.seconds:.1f} s ({tokens_per_sec:,.0f} tokens/s overall), "
              f"best val loss {result.best_val_loss:.4f}, checkpoint {where}")

    def on_exit(self, trainer: Trainer) -> None:
        self._close_bar()

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class TextSample(Callback):
    """A short sample of generated text in TensorBoard's Text tab at every evaluation."""

    def __init__(self, writer: Any, tokenizer: Tokenizer, prompt: str, max_new_tokens: int, seed: int) -> None:
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
            warn(f"no text sample will be logged: sample_prompt {prompt[:40]!r} cannot be encoded ({exc})")
        else:
            if not self.prompt_ids:
                warn("no text sample will be logged: sample_prompt is empty; set --sample_prompt to some text")

    def on_evaluate(self, trainer: Trainer, evaluation: Evaluation) -> None:
        if not self.prompt_ids or not self.max_new_tokens:
            return
        model = trainer.model
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        generator = torch.Generator(device=device).manual_seed(self.seed)
        out = model.generate(torch.tensor([self.prompt_ids], device=device), self.max_new_tokens, temperature=0.8,
                             top_k=200, generator=generator)
        model.train(was_training)
        # A code block keeps the text as generated (Markdown would join its lines), and shows any markup in it.
        self.writer.add_text("sample", markdown_literal(self.tokenizer.decode(out[0].tolist())), evaluation.step)
