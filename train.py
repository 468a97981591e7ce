"""Train a GPT and watch its attention.

    python train.py [CONFIG.toml] [--key=value ...]
    torchrun --nproc_per_node=N train.py [CONFIG.toml] [--key=value ...]

With no CONFIG, configs/pronouns.toml runs: the pronoun demo. `--help` lists
every key. Progress goes to the terminal and to TensorBoard under
log_dir/run_name; the checkpoint to out_dir/ckpt.pt.
"""

from __future__ import annotations

import math
import shlex
import signal
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from data.batches import Batches
from data.prepare import prepare
from errors import UsageError, UserError, run_cli
from model import GPT, GPTConfig
from trainer import runtime as rt_mod
from trainer.checkpoint import load_checkpoint, remove_stale_temp_files, save_checkpoint
from trainer.config import FIELDS, TrainConfig, help_text, load_config
from trainer.optim import lr_at, make_optimizer, set_lr
from trainer.watching import AttentionWatch

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "pronouns.toml"
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "arch", "bias")  # must match to resume; block_size may shrink


class Stop(Exception):
    """Raised inside the loop when a signal asked training to stop."""


def split_args(argv: list[str]) -> tuple[str | None, list[str]]:
    for flag, value in zip(argv, argv[1:], strict=False):
        key = flag[2:]
        if flag.startswith("--") and "=" not in flag and key in FIELDS \
                and not isinstance(FIELDS[key].default, bool) and not value.startswith("-"):
            raise UsageError(f"write --{key}={value} (with '='), not '--{key} {value}'")
    configs = [a for a in argv if not a.startswith("-")]
    if len(configs) > 1:
        raise UsageError(f"give at most one config file, got {configs}; put other settings as --key=value")
    return (configs[0] if configs else None), [a for a in argv if a.startswith("-")]


def model_config(cfg: TrainConfig, vocab_size: int) -> GPTConfig:
    return GPTConfig(vocab_size=vocab_size, block_size=cfg.block_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                     n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias, arch=cfg.arch)


def check_resume_compatible(cfg: TrainConfig, ckpt: dict, tokenizer_meta: dict) -> None:
    saved = ckpt["model_config"]
    if cfg.block_size > saved["block_size"]:  # a smaller one just trains on shorter windows
        raise UsageError(f"--block_size={cfg.block_size} is larger than the {saved['block_size']} the checkpoint "
                         f"was trained with; resume with --block_size={saved['block_size']} or start a new out_dir")
    for key in MODEL_KEYS:
        if saved[key] != getattr(cfg, key):
            raise UsageError(f"config key '{key}' is {getattr(cfg, key)!r} but the checkpoint was trained with "
                             f"{saved[key]!r}; use the same value to resume, or a new --out_dir")
    saved_optimizer = ckpt["train_config"].get("optimizer", "adamw")
    if saved_optimizer != cfg.optimizer:  # the optimizer states would not fit
        raise UsageError(f"config key 'optimizer' is {cfg.optimizer!r} but the checkpoint was trained with "
                         f"{saved_optimizer!r}; use the same value to resume, or a new --out_dir")
    if ckpt["tokenizer"] != tokenizer_meta:
        raise UsageError("the checkpoint's vocabulary does not match this data's; resume with the dataset and "
                         "tokenizer it was trained on, or start a new --out_dir")


class StopSignals:
    """Ctrl-C or SIGTERM: finish the current step, save, exit with 128 + signal."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous = {}

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.received is not None:  # a second Ctrl-C means: stop now
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(help_text("train.py", "configs/pronouns.toml"))
        return 0
    config_path, overrides = split_args(argv)
    if config_path is None and DEFAULT_CONFIG.is_file():
        config_path = str(DEFAULT_CONFIG)
    cfg = load_config(config_path, overrides)
    config_name = Path(config_path).stem if config_path else "default"
    # Until the training loop takes over signals, SIGTERM unwinds like Ctrl-C,
    # so data preparation cleans up its half-written files.
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        rt = rt_mod.setup(cfg)
        try:
            return train(cfg, config_name, rt, argv)
        finally:
            rt_mod.teardown(rt)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def train(cfg: TrainConfig, config_name: str, rt: rt_mod.Runtime, argv: list[str] | None = None) -> int:
    torch.manual_seed(cfg.seed + rt.rank)
    out_dir = Path(cfg.out_dir)
    ckpt_path = out_dir / "ckpt.pt"
    if rt.is_main:
        _check_writable(out_dir, "out_dir")
        remove_stale_temp_files(ckpt_path)
    # A new run must not silently destroy the last one: its first save keeps the old
    # checkpoint one generation back (not earlier, so a run that fails leaves it in place).
    keep_previous = rt.is_main and not cfg.resume and ckpt_path.is_file()

    # --- data ---------------------------------------------------------------------------
    prepared = prepare(cfg.dataset, cfg.tokenizer, cfg.data_dir, cfg.val_fraction, cfg.corpus_sentences,
                       quiet=not rt.is_main)
    tokenizer = prepared.tokenizer
    batches = Batches(prepared, cfg.block_size, cfg.batch_size, rt.device, cfg.seed, rt.rank)
    accum_per_rank = cfg.grad_accum // rt.world_size

    # --- model, optimizer, maybe a checkpoint to resume from -----------------------------
    ckpt = None
    model_cfg = model_config(cfg, tokenizer.vocab_size)
    if cfg.resume:
        if not ckpt_path.is_file():
            raise UserError(f"--resume but there is no checkpoint at {ckpt_path}; drop --resume to start a new "
                            f"run, or set --out_dir to the folder that holds ckpt.pt")
        ckpt = load_checkpoint(ckpt_path, map_location=rt.device)
        check_resume_compatible(cfg, ckpt, tokenizer.to_meta())
        # A smaller --block_size trains on shorter windows; the model keeps the position table it was built with.
        model_cfg.block_size = ckpt["model_config"]["block_size"]
    model = GPT(model_cfg).to(rt.device)
    optimizer = make_optimizer(model, cfg, rt.device)
    start_step, best_val = 0, math.inf
    run_name = cfg.run_name or f"{config_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_step, best_val = ckpt["step"], ckpt["best_val_loss"]
        run_name = cfg.run_name or ckpt.get("run_name", run_name)
        batches.load_state(ckpt["rng"]["batches"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        if start_step >= cfg.max_iters:
            print(f"checkpoint is already at step {start_step} >= max_iters={cfg.max_iters}; "
                  f"raise --max_iters to train further")
            return 0
    raw_model = model
    if cfg.compile:
        model = torch.compile(model)
    if rt.distributed:
        model = DistributedDataParallel(model, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None)

    # --- logging ------------------------------------------------------------------------
    writer = None
    watch = None
    tokens_per_step = cfg.batch_size * cfg.block_size * cfg.grad_accum
    if rt.is_main:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = Path(cfg.log_dir) / run_name
        _check_writable(log_dir, "log_dir")
        writer = SummaryWriter(log_dir=str(log_dir))
        watch = AttentionWatch.create(cfg, prepared, writer)
        print(f"model: {raw_model.num_params() / 1e6:.2f}M parameters ({cfg.arch}, {cfg.n_layer} layers x "
              f"{cfg.n_head} heads x {cfg.n_embd} dims, block {cfg.block_size}); vocabulary {tokenizer.vocab_size}")
        print(f"device: {rt.device}{' x ' + str(rt.world_size) + ' processes' if rt.distributed else ''}, "
              f"{tokens_per_step:,} tokens per step, {torch.get_num_threads()} CPU threads")
        print(f"TensorBoard: tensorboard --logdir {cfg.log_dir} --samples_per_plugin=images=200,text=200")

    # Step of the checkpoint on disk from this run (or the one resumed), and of the last evaluation: a
    # checkpoint saved between a step and its evaluation (Ctrl-C, ckpt_interval) gets that evaluation on resume.
    saved_step = start_step if ckpt is not None else None
    eval_step = ckpt.get("eval_step", start_step) if ckpt is not None else None

    def diverged(what: str, value: object, step: int) -> UserError:
        kept = (f"with {ckpt_path} left at step {saved_step}" if saved_step is not None
                else "before any checkpoint was saved")
        clip = "" if cfg.grad_clip > 0 else " or --grad_clip=1"
        return UserError(f"{what} became {value} at step {step}; training stopped {kept}; try a lower "
                         f"--learning_rate (now {cfg.learning_rate:g}){clip}")

    def checkpoint(step: int) -> None:
        nonlocal saved_step, keep_previous
        if not rt.is_main:
            return
        previous = ckpt_path.with_name("ckpt.prev.pt") if keep_previous else None
        if not all(bool(torch.isfinite(p).all()) for p in raw_model.parameters()):
            raise diverged("a parameter", "inf or nan", step)  # never overwrite a good checkpoint with this
        save_checkpoint(ckpt_path, {
            "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
            "model_config": raw_model.config.to_dict(), "train_config": cfg.to_dict(),
            "tokenizer": tokenizer.to_meta(), "step": step, "best_val_loss": best_val, "run_name": run_name,
            "eval_step": eval_step, "rng": {"torch": torch.get_rng_state(), "batches": batches.state()},
        }, keep_previous=previous)
        if previous is not None:
            keep_previous = False
            print(f"note: {ckpt_path} held an earlier run (this one has no --resume); kept it as {previous}")
        saved_step = step

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        losses = {}
        for split in ("train", "val"):
            total = 0.0
            for x, y in batches.eval_batches(split, cfg.eval_iters):
                with rt.autocast():
                    _, loss = model(x, y)
                total += loss.item()
            losses[split] = total / cfg.eval_iters
        model.train()
        return losses

    # --- the loop -------------------------------------------------------------------------
    model.train()
    # The bar goes to stdout with the other progress lines, so stderr carries only problems.
    bar = tqdm(total=cfg.max_iters, initial=start_step, disable=not rt.is_main, dynamic_ncols=True,
               desc="train", mininterval=0.5, file=sys.stdout)
    last_losses: dict[str, float] = {}
    t_log, tokens_since_log, tokens_per_sec = time.perf_counter(), 0, 0.0
    t_start = time.perf_counter()
    step = start_step
    exit_code = 0
    with StopSignals() as signals:
        try:
            while True:
                if (step % cfg.eval_interval == 0 or step == cfg.max_iters) and step != eval_step:
                    last_losses = evaluate()
                    eval_step = step
                    if rt.is_main:
                        bar.write(f"step {step}: train loss {last_losses['train']:.4f}, "
                                  f"val loss {last_losses['val']:.4f}")
                        writer.add_scalar("loss/val", last_losses["val"], step)
                        writer.add_scalar("loss/train_eval", last_losses["train"], step)
                        watch.at_evaluation(raw_model, step)
                        writer.flush()
                    if last_losses["val"] < best_val:
                        best_val = last_losses["val"]
                        if step > 0:
                            checkpoint(step)
                if step >= cfg.max_iters:
                    break

                lr = lr_at(step, cfg)
                set_lr(optimizer, lr)
                loss_sum = torch.zeros((), device=rt.device)
                for micro in range(accum_per_rank):
                    x, y = batches.train()
                    # Gradients sync across processes only on the last micro-batch.
                    sync = nullcontext() if (not rt.distributed or micro == accum_per_rank - 1) else model.no_sync()
                    with sync, rt.autocast():
                        _, loss = model(x, y)
                        loss = loss / accum_per_rank
                    loss.backward()
                    loss_sum += loss.detach()
                if not torch.isfinite(loss_sum):
                    raise diverged("the loss", loss_sum.item(), step)
                grad_norm = None
                if cfg.grad_clip > 0:
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                    if not torch.isfinite(grad_norm):
                        raise diverged("the gradient norm", grad_norm.item(), step)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                tokens_since_log += tokens_per_step

                if rt.is_main and (step % cfg.log_interval == 0 or step == cfg.max_iters):
                    now = time.perf_counter()
                    tokens_per_sec = tokens_since_log / (now - t_log)
                    t_log, tokens_since_log = now, 0
                    train_loss = loss_sum.item()
                    bar.set_postfix(loss=f"{train_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_sec:,.0f}")
                    writer.add_scalar("loss/train", train_loss, step)
                    writer.add_scalar("lr", lr, step)
                    if grad_norm is not None:
                        writer.add_scalar("grad_norm", grad_norm.item(), step)
                    writer.add_scalar("throughput/tokens_per_sec", tokens_per_sec, step)
                if rt.is_main:
                    bar.update(1)
                if cfg.ckpt_interval and step % cfg.ckpt_interval == 0:
                    checkpoint(step)
                if signals.received is not None:
                    raise Stop
        except Stop:
            checkpoint(step)
            exit_code = 128 + signals.received
            if rt.is_main:
                bar.close()
                name = signal.Signals(signals.received).name
                given = [a for a in (sys.argv[1:] if argv is None else argv) if a.split("=")[0] != "--resume"]
                print(f"\n{name}: saved step {step} to {ckpt_path}; resume with: "
                      f"{shlex.join(['python', 'train.py', *given, '--resume'])}")
        except BaseException:
            if writer is not None:
                writer.close()  # keep the TensorBoard events logged so far
            raise
        finally:
            bar.close()
    wall = time.perf_counter() - t_start

    if exit_code == 0:
        checkpoint(step)
    if rt.distributed:
        agree = ranks_agree(raw_model)
        if rt.is_main:
            print(f"parameters identical on all {rt.world_size} processes: {agree}")
    if rt.is_main:
        steps_done = step - start_step
        print(f"done: {steps_done} steps in {wall:.1f} s ({steps_done * tokens_per_step / max(wall, 1e-9):,.0f} "
              f"tokens/s overall), best val loss {best_val:.4f}, checkpoint {ckpt_path}")
        final = watch.at_end(raw_model, step) if exit_code == 0 else {}
        hparams = {k: v for k, v in cfg.to_dict().items() if isinstance(v, (int, float, str, bool))}
        metrics = {"hparam/best_val_loss": best_val, "hparam/wall_seconds": wall, **final}
        if last_losses:
            metrics["hparam/final_train_loss"] = last_losses["train"]
        writer.add_hparams(hparams, metrics, run_name=".")
        writer.close()
        print(f"open TensorBoard: tensorboard --logdir {cfg.log_dir} --samples_per_plugin=images=200,text=200")
        print(f"sample: python sample.py --out_dir={cfg.out_dir} --prompt \"...\"")
    return exit_code


def ranks_agree(model: torch.nn.Module) -> bool:
    """Whether every process holds exactly the same parameters (DDP's promise)."""
    import torch.distributed as dist

    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def _check_writable(folder: Path, key: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write to {key} {folder} ({exc.strerror or exc}); choose a writable --{key}") from None


if __name__ == "__main__":
    sys.exit(run_cli(main, sys.argv[1:]))
