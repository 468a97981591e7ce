"""What activation patching costs on a checkpoint (the pronoun demo's, say), in one process:

    python bench/patching.py out/pronouns [--repeats 20] [--threads 2]

- a pair's whole analysis (`watch.measure.patching.analyse`: every head at every position, at each position, the
  residual stream at each layer and position, every pattern; attribution and the logit lens), on the pronoun
  demo's pair "The big dog fetched the big ball and she" / "... and it";
- what a watch pass reads of the pairs (`watched`, on the pairs the watch makes for this checkpoint);
- a pass of the watch over the checkpoint's probe sets with and without the pairs, taking turns: a whole pass (as
  at an evaluation) and a quick one (as every `watch_interval` steps between them).

Prints the median wall time of each and its range, and the CPU time (`time.process_time`, which leaves out the
time a thread waits for a core on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from formats import load_model  # noqa: E402
from formats.sources import identify  # noqa: E402
from watch.inspect import checkpoint_sets  # noqa: E402
from watch.measure.patching import PAIRS, analyse, pair_for, watched  # noqa: E402
from watch.measure.probesets import ProbeSets  # noqa: E402
from watch.measure.reading import measure, quick_sets  # noqa: E402

CLEAN, CORRUPTED = "The big dog fetched the big ball and she", "The big dog fetched the big ball and it"


def timed(work, repeats: int) -> tuple[list[float], list[float]]:
    """(wall times, CPU times) of `repeats` calls of `work`, after one untimed call."""
    work()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        work()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus


def line(name: str, walls: list[float], cpus: list[float]) -> str:
    return (
        f"{name}: median {1000 * statistics.median(walls):.1f} ms wall (range {1000 * min(walls):.1f}-"
        f"{1000 * max(walls):.1f}), {1000 * statistics.median(cpus):.1f} ms CPU"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint folder, e.g. out/pronouns")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(identify(args.checkpoint, model=False), torch.device("cpu"))
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    pair = pair_for(model, tokenizer, CLEAN, CORRUPTED)
    print(
        line(f"a pair's whole analysis ({len(pair.clean)} tokens)", *timed(lambda: analyse(model, pair), args.repeats))
    )
    sets = checkpoint_sets(model, tokenizer, loaded.checkpoint, None)
    pairs = sets.get(PAIRS)
    print(
        line(
            f"a watch pass's pairs ({pairs.about})",
            *timed(lambda: watched(model, pairs.items), args.repeats),
        )
    )
    without = ProbeSets({kind: s for kind, s in sets.sets.items() if kind != PAIRS})
    chosen = {
        "a whole watch pass without the pairs": without,
        "a whole watch pass with the pairs": sets,
        "a quick watch pass without the pairs": quick_sets(without),
        "a quick watch pass with the pairs": quick_sets(sets),
    }
    passes = {name: ([], []) for name in chosen}
    for _ in range(args.repeats):  # taking turns, so each meets the same machine
        for name, probe_sets in chosen.items():
            walls, cpus = timed(lambda probe_sets=probe_sets: measure(model, probe_sets), 1)
            passes[name][0].extend(walls)
            passes[name][1].extend(cpus)
    for name, (walls, cpus) in passes.items():
        print(line(name, walls, cpus))


if __name__ == "__main__":
    main()
