"""Running measurements: each in a child process of its own, timed whole, with its own peak
memory, repeated and interleaved.

A child process starts cold like a user's run, and `wait4` reports the peak resident set of
that child alone. With several repeats every unit runs once per repeat, in reverse order every
other repeat (A B C, C B A, ...), so a slow patch of a shared machine hits both sides of a
comparison rather than one.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCRATCH = BENCH / "out"  # ignored by git


def log(message: str = "") -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class ChildRun:
    command: list[str]
    started_at: float  # time.time() when it started, to place its own timestamps
    returncode: int
    wall_s: float
    max_rss_mb: float | None
    lines: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, stdout line)


def run_child(
    command: Sequence[str],
    *,
    cwd: Path = REPO,
    label: str = "",
    env: dict | None = None,
    echo: Callable[[str], bool] = lambda line: True,
) -> ChildRun:
    """Runs `command`, timestamping each stdout line as it arrives (echoed to stderr when
    `echo(line)`); returns its exit status, wall time from start to exit, and peak RSS."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    lines: list[tuple[float, str]] = []
    started_at = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
    )
    try:
        for line in proc.stdout:  # text mode splits tqdm's carriage-return updates into lines too
            now = time.perf_counter() - t0
            lines.append((now, line.rstrip("\n")))
            if line.strip() and echo(line):
                log(f"    [{label} {now:6.1f}s] {line.rstrip()}")
    except KeyboardInterrupt:
        proc.wait()
        raise
    code, rss = _wait_with_rss(proc)
    return ChildRun(list(command), started_at, code, time.perf_counter() - t0, rss, lines)


def _wait_with_rss(proc: subprocess.Popen) -> tuple[int, float | None]:
    """Exit status and the child's peak resident set in MiB."""
    if not hasattr(os, "wait4"):
        return proc.wait(), None
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    kib = usage.ru_maxrss / 1024 if sys.platform == "darwin" else usage.ru_maxrss  # macOS reports bytes
    return proc.returncode, kib / 1024


def run_worker(name: str, args: dict, label: str | None = None) -> dict:
    """One of `bench.workers`' measurements in a child process; its returned dict, with the
    process's wall time and peak memory added (or `error`)."""
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        run = run_child(
            [sys.executable, "-m", "bench.workers", name, json.dumps(args), str(result_path)], label=label or name
        )
        if run.returncode != 0 or not result_path.is_file():
            return {"error": f"worker {name} exited with status {run.returncode} (its output is above)"}
        result = json.loads(result_path.read_text())
    return {**result, "max_rss_mb": run.max_rss_mb, "process_wall_s": run.wall_s}


Unit = tuple[str, str]  # (section, what)


def interleaved(units: Sequence[Unit], repeats: int, measure: Callable[[Unit], dict]) -> dict[Unit, list[dict]]:
    """Every unit once per repeat, in reverse order every other repeat."""
    raw: dict[Unit, list[dict]] = {unit: [] for unit in units}
    for repeat in range(repeats):
        for unit in units if repeat % 2 == 0 else list(reversed(units)):
            log(f"[{repeat + 1}/{repeats}] {unit[0]} {unit[1]}")
            raw[unit].append(measure(unit))
    return raw


def spread(values: Sequence[float | None]) -> dict | None:
    """Median, range and every value of a figure over repeats (None when no repeat has it)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {
        "median": statistics.median(present),
        "min": min(present),
        "max": max(present),
        "n": len(present),
        "values": list(present),
    }


def git_commit() -> str | None:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        # --no-optional-locks: reading status must never take the index lock from someone committing.
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("+dirty" if dirty else "")) or None


def machine_info() -> dict:
    import torch

    cpu = None
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    except OSError:
        pass
    return {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "commit": git_commit(),
    }


def load_config(path: str | Path | None, overrides: list[str]):
    """What `train.py PATH OVERRIDES...` trains with (a `TrainConfig`), for callers holding the two apart."""
    from common.errors import UsageError
    from common.settings import make_config, parse_command_line

    config, values = parse_command_line(overrides)
    if config is not None:
        raise UsageError(f"unexpected argument {config!r}; overrides look like --key=value")
    return make_config(path, values)
