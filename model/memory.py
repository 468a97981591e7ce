"""Memory: how many parameters a model of a config has, how much can still be allocated, whether something
fits, and sizes in words. Read by whatever must refuse something too large before allocating it (a training
config, a checkpoint, a model read from elsewhere): each says what it needs, and `shortfall` alone compares it
with what is free."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from model.config import GPTConfig


class _ShapesOnly(torch.overrides.TorchFunctionMode):
    """While a model is built on the meta device to be counted: normal_ left undone and arange made on the CPU
    (rotary's small tables). On the meta device both run through torch's decompositions, whose first use imports
    torch._dynamo and sympy: more than a second of every command's start-up, for nothing else in a run."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.nn.init.normal_, torch.Tensor.normal_):
            return args[0] if args else kwargs["tensor"]
        if func is torch.arange:
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def parameter_count(config: GPTConfig, *, positions: bool = True) -> int:
    """The parameters of a GPT of `config` (the tied head once); without `positions`, leaving out the position
    table or the relative position biases, as GPT-2 reports its size. Counted on a model of one block built on
    the meta device, which allocates nothing, the other blocks being the same: every option counts itself, and
    a config that claims a million layers costs no more to count than one."""
    from model.gpt import GPT

    with torch.device("meta"), _ShapesOnly():
        one = GPT(dataclasses.replace(config, n_layer=1))
    block = sum(p.numel() for p in one.blocks[0].parameters())
    total = sum(p.numel() for p in one.parameters()) + (config.n_layer - 1) * block
    if not positions:
        bias = one.blocks[0].attn.position_bias
        total -= (one.wpe.weight.numel() if one.wpe is not None else 0) + (
            config.n_layer * bias.numel() if bias is not None else 0
        )
    return total


def shortfall(need: int, device: torch.device) -> int | None:
    """The bytes free on `device` when `need` bytes do not fit there; None when they do, or nobody knows."""
    free = available_memory(device)
    return free if free is not None and need > free else None


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device` (None: unknown). On the CPU: MemAvailable plus
    free swap, within the container's memory limit when there is one."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return min((n for n in (_meminfo_free(), _cgroup_headroom()) if n is not None), default=None)


def _meminfo_free() -> int | None:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    info = {}
    for line in lines:
        name, _, value = line.partition(":")
        if value.strip().endswith("kB") and value.split()[0].isdigit():
            info[name] = int(value.split()[0]) * 1024
    return info["MemAvailable"] + info.get("SwapFree", 0) if "MemAvailable" in info else None


def _cgroup_headroom() -> int | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return int(limit) - used if limit.isdigit() else None


def size_text(n: float) -> str:
    """A byte count in words: "512 bytes", "64.0 MiB", "2.3 GiB"."""
    unit = "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            break
        n /= 1024
    return f"{n:,.0f} bytes" if unit == "bytes" else f"{n:,.1f} {unit}"
