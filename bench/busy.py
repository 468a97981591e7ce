"""The default demo on an idle machine and beside one other 2-thread training, at a commit (A, a git worktree of it)
and in this working tree (B), interleaved: how much a busy machine slows the demo, before and after.

    python bench/busy.py --rev 64db07a --repeats 5
    python bench/busy.py --rev main --quick          # the harness only: a few steps, not figures

Each repeat runs four units, in an order reversed every other repeat (A idle, B idle, A busy, B busy, then back):
the demo as the README runs it (`python train.py`, with its own out_dir and TensorBoard folder under
bench/out/busy/), timed whole from process start to exit, alone or beside the neighbour. The neighbour is nanoGPT's
CPU recipe (bench/nanogpt.py) made endless, with OMP_NUM_THREADS=2 (two threads, and OpenMP's own wait policy: a
training as any other program runs it), started before the demo and stopped once the demo has ended; the demo starts
once the neighbour has taken its first step. Prints each side's medians and ranges, busy / idle per side and B / A,
each ratio taken per repeat; and the thread line each side printed beside the neighbour.

Run it on an otherwise idle machine: what it measures is how two trainings share the cores.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import nanogpt  # noqa: E402
from bench.harness import REPO, SCRATCH, interleaved, log, machine_info, run_child, spread  # noqa: E402
from bench.report import figure  # noqa: E402

HERE = SCRATCH / "busy"
QUICK = ["--max_iters=20", "--eval_interval=10", "--watch_interval=10"]  # a smoke test of the harness
UNITS = [("A", "idle"), ("B", "idle"), ("A", "busy"), ("B", "busy")]


def worktree(rev: str) -> Path:
    """A fresh git worktree of `rev` under bench/out/busy/."""
    tree = HERE / "tree-a"
    if tree.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
        shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=REPO, check=True, capture_output=True)
    return tree


def demo(tree: Path, name: str, extra: list[str]) -> dict:
    """The default demo run whole in `tree`: its wall time and the line that says its threads."""
    out_dir, runs = HERE / "out" / name, HERE / "runs"
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(runs / name, ignore_errors=True)
    command = [sys.executable, "train.py", f"--out_dir={out_dir}", f"--log_dir={runs}", f"--run_name={name}", *extra]
    run = run_child(command, cwd=tree, label=name, echo=lambda line: False)
    device = next((line for _, line in run.lines if line.startswith("device: ")), "")
    if run.returncode != 0:
        return {"error": f"train.py exited with status {run.returncode}: {run.lines[-1][1] if run.lines else ''}"}
    return {"wall_s": run.wall_s, "device": device}


@contextlib.contextmanager
def neighbour():
    """nanoGPT's recipe, endless, on two threads, from its first step until the block ends."""
    command = nanogpt.train_command(str(HERE / "nanogpt-out"), max_iters=1_000_000, eval_interval=1_000_000)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        command, cwd=nanogpt.HOME, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # It prints a line a step: read on (and keep none), or its pipe fills and it waits.
    reader = threading.Thread(target=collections.deque, args=(proc.stdout, 0), daemon=True)
    try:
        said = []
        for line in proc.stdout:  # its steps under way: the machine is busy
            if line.startswith("iter "):
                break
            said.append(line)
        else:
            raise RuntimeError(f"nanoGPT's train.py ended before its first step: {''.join(said[-5:])}")
        reader.start()
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(unit: tuple[str, str], tree: Path, extra: list[str], number: int) -> dict:
    side, state = unit
    with neighbour() if state == "busy" else contextlib.nullcontext():
        return demo(tree, f"{side}-{state}-{number}", extra)


def summarise(raw: dict[tuple[str, str], list[dict]]) -> dict:
    """Each unit's wall time over the repeats, and the ratios taken per repeat: busy / idle for each side, and
    B / A idle and busy."""
    wall = {unit: [r.get("wall_s") for r in runs] for unit, runs in raw.items()}

    def ratios(top: tuple[str, str], bottom: tuple[str, str]) -> dict | None:
        pairs = zip(wall[top], wall[bottom], strict=True)
        return spread([t / b if t and b else None for t, b in pairs])

    return {
        "wall_s": {f"{side} {state}": spread(values) for (side, state), values in wall.items()},
        "busy / idle": {side: ratios((side, "busy"), (side, "idle")) for side in ("A", "B")},
        "B / A": {state: ratios(("B", state), ("A", state)) for state in ("idle", "busy")},
        "threads beside it": {
            side: next((r["device"] for r in reversed(raw[(side, "busy")]) if r.get("device")), "")
            for side in ("A", "B")
        },
    }


def render(summary: dict, rev: str) -> str:
    lines = [f"A = {rev}, B = this working tree; seconds, whole process: median (range, n)"]
    for unit, value in summary["wall_s"].items():
        lines.append(f"  {unit:<8} {figure(value, 2)}")
    for side, value in summary["busy / idle"].items():
        lines.append(f"  {side} beside the training / idle: {figure(value, 2, 'x')}")
    for state, value in summary["B / A"].items():
        lines.append(f"  B / A {state}: {figure(value, 3, 'x')}")
    for side, device in summary["threads beside it"].items():
        lines.append(f"  {side} beside it said: {device}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", required=True, help="the commit to compare with (A), e.g. main or a hash")
    p.add_argument("--repeats", type=int, default=3, help="runs of every unit, interleaved (default 3)")
    p.add_argument("--quick", action="store_true", help="a few steps each: a smoke test of the harness, not figures")
    args = p.parse_args(argv)
    missing = nanogpt.available()
    if missing:
        raise SystemExit(f"error: cannot run nanoGPT's recipe beside the demo: {missing}")
    nanogpt.prepare()
    HERE.mkdir(parents=True, exist_ok=True)
    trees = {"A": worktree(args.rev), "B": REPO}
    extra = QUICK if args.quick else []
    log(f"{shlex.join(['python', 'bench/busy.py', *argv])} on {machine_info()['cpu']}")
    try:
        for side, tree in trees.items():  # untimed: each tree prepares the demo's corpus once
            demo(tree, f"{side}-warm-up", ["--max_iters=1"])
        numbers = itertools.count()
        raw = interleaved(UNITS, args.repeats, lambda unit: measure(unit, trees[unit[0]], extra, next(numbers)))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(trees["A"])], cwd=REPO, check=False)
    print(render(summarise(raw), args.rev))
    return 1 if any("error" in r for runs in raw.values() for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
