"""A watch pass at a revision A against the working tree B, on one or more checkpoints:

    python bench/watch_ab.py CKPT [CKPT ...] [--rev f50ae90] [--repeats 7]

A is `git archive` of `--rev` in a temporary folder. Each side loads the checkpoint in a worker process of its own
(two torch threads, as a run on this machine has), makes the probe sets a run of it is watched on
(`watch.inspect.checkpoint_sets`, the run's own prepared data) and reads the untrained baseline once; then the
workers take turns, A B B A A B ..., each timing the two passes a run makes: the quick one every `watch_interval`
steps (`quick_sets`) and the whole one of the last evaluation. B is timed twice, with path patching (what a run does
by default) and without it (`watch_paths = false`, and every pass of A). Prints each median wall time, its range,
and the ratios of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASSES = ("quick", "whole")


def worker(tree: str, ckpt: str) -> None:
    """Loads `ckpt` with `tree`'s code, then answers each line on stdin ("quick" or "whole", "-" + "paths" to leave
    them out) with one timed pass."""
    sys.path.insert(0, tree)
    import torch

    torch.set_num_threads(2)
    from formats import load_model
    from watch.inspect import checkpoint_sets
    from watch.measure import reading
    from watch.measure.headtypes import TYPE_SETS
    from watch.measure.probesets import ProbeSets

    loaded = load_model(ckpt, torch.device("cpu"))
    model = loaded.model.eval()
    sets = checkpoint_sets(model, loaded.tokenizer, loaded.checkpoint, None)
    untrained = reading.read_pass(
        reading.untrained_like(model, 1337), sets, kinds=TYPE_SETS, compose=True, is_untrained=True
    )

    def without_paths(found: ProbeSets) -> ProbeSets:
        return ProbeSets({k: v for k, v in found.sets.items() if k != "paths"}, dict(found.missing))

    chosen = {"whole": sets, "quick": reading.quick_sets(sets)}
    print("ready", flush=True)
    for line in sys.stdin:
        name = line.strip()
        found = chosen[name.removesuffix("-paths")]
        found = without_paths(found) if name.endswith("-paths") else found
        wall = time.perf_counter()
        read = reading.read_pass(model, found, untrained=untrained, compose=True)
        wall = time.perf_counter() - wall
        paths = len(getattr(read.results, "paths", []))
        print(json.dumps({"wall": wall, "paths": paths}), flush=True)


def start_worker(tree: Path, ckpt: str) -> subprocess.Popen:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), ckpt]
    # Both from the checkout, so both find the run's prepared data (data/prepared) and read the same sets.
    proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise SystemExit(f"the worker in {tree} did not start: {line!r}")
    return proc


def timed(proc: subprocess.Popen, name: str) -> dict:
    proc.stdin.write(name + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def compare(ckpt: str, tree_a: Path, repeats: int) -> None:
    sides = {"A": start_worker(tree_a, ckpt), "B": start_worker(ROOT, ckpt)}
    units = [("A", p) for p in PASSES] + [("B", p) for p in PASSES] + [("B", f"{p}-paths") for p in PASSES]
    found: dict[tuple[str, str], list[float]] = {unit: [] for unit in units}
    try:
        for repeat in range(repeats):
            for side, name in units if repeat % 2 == 0 else reversed(units):
                found[(side, name)].append(timed(sides[side], name)["wall"])
    finally:
        for proc in sides.values():
            proc.stdin.close()
            proc.wait()
    print(f"\n{ckpt}: median wall time of a pass over {repeats} repeats, interleaved (ms, range)")
    for (side, name), walls in found.items():
        label = f"{side} {name}" + (" (B without paths)" if name.endswith("-paths") else "")
        print(
            f"  {label:<32} {1000 * statistics.median(walls):8.1f}  ({1000 * min(walls):.1f}-{1000 * max(walls):.1f})"
        )
    for name in PASSES:
        a, b, plain = (statistics.median(found[unit]) for unit in (("A", name), ("B", name), ("B", f"{name}-paths")))
        print(f"  {name}: B/A {b / a:.3f}; B without paths / A {plain / a:.3f}; B with / without paths {b / plain:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="*")
    parser.add_argument("--rev", default="f50ae90")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--worker", nargs=2, metavar=("TREE", "CKPT"))
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "a"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", args.rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for ckpt in args.checkpoints:
            compare(ckpt, tree, args.repeats)


if __name__ == "__main__":
    main()
