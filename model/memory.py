"""Memory: how much can still be allocated, and sizes in words. Read by whatever must refuse
something too large before allocating it (a training config, a model read from elsewhere)."""

from __future__ import annotations

from pathlib import Path

import torch


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device` (None: unknown). On the CPU: MemAvailable plus
    free swap, within the container's memory limit when there is one."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    info = _meminfo()
    free = info["MemAvailable"] + info.get("SwapFree", 0) if "MemAvailable" in info else None
    limit = _cgroup_headroom()
    if free is None or limit is None:
        return free if limit is None else limit
    return min(free, limit)


def _meminfo() -> dict[str, int]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    info = {}
    for line in lines:
        name, _, value = line.partition(":")
        if value.strip().endswith("kB") and value.split()[0].isdigit():
            info[name] = int(value.split()[0]) * 1024
    return info


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
