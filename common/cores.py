"""How many CPU threads a run takes: on an idle machine torch's default, a thread per core; on a machine whose cores
other programs keep busy, the cores they leave free when the run starts (one at least), its OpenMP threads sleeping
rather than spinning while they wait for each other (OMP_WAIT_POLICY=PASSIVE).

Two programs whose threads each spin on the same few cores wait on each other: each spinning thread holds a core the
other's work needs, and a run beside another training slows tens of times rather than about twice. OpenMP reads its
wait policy once, when torch loads it, so train.py looks at the cores (`look_before_torch_loads`) before it imports
torch, and `trainer.runtime.setup` then sets the threads (`threads`). A `threads` setting wins, and so do
OMP_NUM_THREADS and OMP_WAIT_POLICY in the environment (torchrun sets the first for the processes it starts). This
module imports nothing but the standard library, so that it can run first.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

LOOK = 0.03  # seconds the cores are watched for, with this process asleep: three ticks of Linux's CPU clock


@dataclass(frozen=True)
class Cores:
    """The cores this process may run on (`usable`) and how many of them other programs kept busy (`busy`, a
    fraction of a core each) as it started."""

    usable: int
    busy: float

    @property
    def free(self) -> int:
        return max(1, self.usable - round(self.busy))

    def note(self) -> str:
        """Why a run takes fewer threads than cores, for the line that says how many."""
        kept = f"other programs kept {self.busy:.1f} of its {self.usable} cores busy as it started"
        return f" ({kept}; --threads=N to choose)"


_at_start: Cores | None = None  # what `look_before_torch_loads` saw, when the cores were busy


def cpu_times(stat: str, cpus: set[int]) -> dict[int, tuple[int, int]]:
    """{cpu: (busy, total)} clock ticks of each of `cpus` since boot, from the text of Linux's /proc/stat. Waiting for
    a disk counts as idle; time a hypervisor gave to another machine (steal) as busy: it was not this one's."""
    times = {}
    for line in stat.splitlines():
        name, *fields = line.split()
        number = name.removeprefix("cpu")
        if name.startswith("cpu") and number.isdigit() and int(number) in cpus:
            ticks = [int(field) for field in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(number)] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    return times


def busy_cores(before: str, after: str, cpus: set[int]) -> float:
    """How many of `cpus` were busy between two readings of /proc/stat, each core a fraction from 0 to 1."""
    first, then = cpu_times(before, cpus), cpu_times(after, cpus)
    busy = 0.0
    for cpu in first.keys() & then.keys():
        total = then[cpu][1] - first[cpu][1]
        if total > 0:
            busy += (then[cpu][0] - first[cpu][0]) / total
    return busy


def look_before_torch_loads() -> None:
    """Watches the cores this process may use for `LOOK` seconds, where Linux says how busy they are; if other
    programs keep any busy, tells OpenMP to let waiting threads sleep, and keeps what it saw for `threads`. Nothing
    where the environment already says (OMP_NUM_THREADS, OMP_WAIT_POLICY), or where the cores cannot be read."""
    global _at_start
    if "OMP_NUM_THREADS" in os.environ or "OMP_WAIT_POLICY" in os.environ or not hasattr(os, "sched_getaffinity"):
        return
    cpus = os.sched_getaffinity(0)
    try:
        with open("/proc/stat") as stat:
            before = stat.read()
            time.sleep(LOOK)
            stat.seek(0)
            after = stat.read()
    except OSError:
        return
    cores = Cores(len(cpus), busy_cores(before, after, cpus))
    if cores.free < cores.usable:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        _at_start = cores


def threads(default: int) -> tuple[int, str]:
    """The threads a run takes, given torch's `default`, and why in words ("" for the default): the cores left free
    when it started, if other programs kept some busy."""
    if _at_start is None or _at_start.free >= default:
        return default, ""
    return _at_start.free, _at_start.note()
