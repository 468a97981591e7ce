"""Where training runs: the device, its precision, threads and processes, and whether a run fits in its memory.

The memory estimates are deliberately low (a lower bound of what training certainly needs), so a config is
refused only when it cannot fit; a config that passes and still runs out of memory is caught where it allocates
(`out_of_memory`), and both name the config key to lower.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from cli import UsageError, UserError, is_out_of_memory
from config import TrainConfig, pick_device
from data.corpora import GENERATED
from files import NotParsed, parse_int, quoted
from model.memory import parameter_count, shortfall
from model.memory import size_text as _size


@dataclass
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # None: plain float32
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def setup(cfg: TrainConfig) -> Runtime:
    """Picks the device; under torchrun, joins the process group (nccl on CUDA, gloo on CPU)."""
    if cfg.threads:
        cpus = os.cpu_count() or 1
        if cfg.threads > cpus:  # far more threads than CPUs only slows torch down, or fails to start them
            raise UsageError(f"--threads={cfg.threads} but this machine has {cpus} CPUs; use at most {cpus}, "
                             f"or 0 for torch's default")
        torch.set_num_threads(cfg.threads)
    world_size, rank, local_rank = launcher_ranks()
    device = pick_device(cfg.device)
    if world_size > 1:
        if cfg.grad_accum % world_size:
            raise UsageError(f"grad_accum={cfg.grad_accum} must be a multiple of the {world_size} processes, so "
                             f"each optimizer step sees the same tokens at any world size; set --grad_accum="
                             f"{world_size * max(1, cfg.grad_accum // world_size)}")
        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    bfloat16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device.type == "cuda")
    return Runtime(device, torch.bfloat16 if bfloat16 else None, rank, local_rank, world_size)


def launcher_ranks() -> tuple[int, int, int]:
    """(WORLD_SIZE, RANK, LOCAL_RANK), which torchrun sets for each process it starts; (1, 0, 0) without it. A
    value that is no whole number, or that no launcher sets (a rank beyond the world), is a UsageError."""
    numbers = []
    for name, default in (("WORLD_SIZE", "1"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        text = os.environ.get(name, default)
        try:
            numbers.append(parse_int(text))
        except ValueError as exc:
            why = f" ({exc})" if isinstance(exc, NotParsed) else ""
            raise UsageError(f"the environment variable {name}={quoted(text)} is not a whole number{why}; torchrun "
                             f"sets it: unset it to train in one process") from None
    world_size, rank, local_rank = numbers
    if not 0 <= rank < world_size or local_rank < 0:
        raise UsageError(f"the environment says this is process RANK={rank} (LOCAL_RANK={local_rank}) of "
                         f"WORLD_SIZE={world_size}, which no launcher sets; unset them to train in one process, "
                         f"or start with torchrun")
    return world_size, rank, local_rank


def teardown(rt: Runtime) -> None:
    if rt.distributed and dist.is_initialized():
        # Free what still holds the group (DDP's reducer sits in reference cycles) while Python is
        # fully alive: gloo work freed during interpreter shutdown can abort the process (SIGABRT).
        gc.collect()
        # Everyone arrives before anyone leaves: a process that tears down its
        # connections while another still sends makes gloo abort the latter.
        dist.barrier()
        dist.destroy_process_group()


def ranks_agree(model: torch.nn.Module) -> bool:
    """Whether every process holds exactly the same parameters (DDP's promise)."""
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


# Preparing text holds it several times over: the text, the ids as Python ints, then as numpy
# arrays. Measured on the pronoun corpus: about 1.3 kB per generated sentence, 18 bytes per
# character of a char-tokenized text; these are rounded down.
BYTES_PER_SENTENCE = 1000
BYTES_PER_TEXT_BYTE = 10


def check_corpus_fits(cfg: TrainConfig) -> None:
    """Refuses a corpus whose preparation cannot fit in memory, before it starts."""
    if cfg.dataset in GENERATED:
        need = cfg.corpus_sentences * BYTES_PER_SENTENCE
        what, fix = f"generating {cfg.corpus_sentences:,} sentences", "lower --corpus_sentences"
    elif Path(cfg.dataset).is_file():
        size = Path(cfg.dataset).stat().st_size
        need = size * BYTES_PER_TEXT_BYTE
        what, fix = f"preparing {cfg.dataset} ({_size(size)})", "use a smaller text"
    else:
        return
    free = shortfall(need, torch.device("cpu"))
    if free is not None:
        raise UserError(f"{what} needs at least {_size(need)} of memory, and {_size(free)} is free; {fix}")


def training_bytes(cfg: TrainConfig, vocab_size: int) -> dict[str, int]:
    """A lower bound on training's memory: {"parameters": weights, gradients and optimizer state,
    "activations": one micro-batch's saved activations and logits}."""
    m = cfg.model
    tokens = cfg.batch_size * m.block_size
    # Per layer and token at least: the first norm, q/k/v, attention output and projection (6 d) and, unless
    # attention-only, the second norm and the MLP's in and out (11 d more).
    per_token = m.n_layer * (6 if m.attn_only else 17) * m.n_embd + 3 * vocab_size
    return {"parameters": 16 * parameter_count(cfg.model_config(vocab_size)), "activations": 4 * tokens * per_token}


def check_training_fits(cfg: TrainConfig, vocab_size: int, device: torch.device, *, held: int = 0) -> None:
    """Refuses, naming the keys to lower, a config whose training cannot fit in `device`'s memory; `held`: bytes of
    it allocated there already (the weights of a model read to fine-tune)."""
    need = training_bytes(cfg, vocab_size)
    total = sum(need.values()) - held
    free = shortfall(total, device)
    if free is not None:
        loaded = f", of which the weights read, {_size(held)}, are loaded already" if held else ""
        raise UserError(f"this config needs at least {_size(total + held)} of memory to train on {device.type} "
                        f"(parameters and optimizer {_size(need['parameters'])}, activations "
                        f"{_size(need['activations'])}{loaded}), and {_size(free)} {'more ' if held else ''}is free; "
                        f"{_keys_to_lower(cfg, need)}")


def _keys_to_lower(cfg: TrainConfig, need: dict[str, int]) -> str:
    if cfg.fine_tunes:  # the model's sizes are the model's own
        if need["parameters"] >= need["activations"]:
            return f"fine-tune a smaller model than {cfg.init_from}, or use a machine with more memory"
        return f"lower --batch_size (now {cfg.batch_size:,}) or --block_size (now {cfg.model.block_size:,})"
    if need["parameters"] >= need["activations"]:
        return f"lower --n_embd (now {cfg.model.n_embd:,}) or --n_layer (now {cfg.model.n_layer:,})"
    return (f"lower --batch_size (now {cfg.batch_size:,}), --block_size (now {cfg.model.block_size:,}) or --n_layer "
            f"(now {cfg.model.n_layer:,})")


@contextlib.contextmanager
def out_of_memory(cfg: TrainConfig) -> Iterator[None]:
    """An allocation that fails inside becomes one line naming the keys to lower."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        need = training_bytes(cfg, 1)
        raise UserError(f"ran out of memory ({' '.join(str(exc).split())[:120] or type(exc).__name__}); "
                        f"{_keys_to_lower(cfg, need)}") from None
