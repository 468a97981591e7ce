"""Where training runs: device, precision, threads and processes."""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from cli import UsageError
from config import TrainConfig, pick_device
from files import NotParsed, parse_int, quoted


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
    autocast_dtype = None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        if cfg.dtype in ("auto", "bfloat16"):
            autocast_dtype = torch.bfloat16
    elif cfg.dtype == "bfloat16":
        autocast_dtype = torch.bfloat16
    return Runtime(device, autocast_dtype, rank, local_rank, world_size)


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
