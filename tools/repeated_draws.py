"""How much the repeated-token figures move when the random sequences are drawn again: for each of several draws
(seeds 0, 1, ...; the watch reads draw 0), the best induction head's score, the best duplicate-token head's, the
in-context gain on repeated tokens and the best induction head's score by distance, each with its spread, and what a
pass over those sets costs, whole and quick (the part a pass between evaluations reads), beside a draw of
another size (`--against`, 32 by default: the draw before it was 128).

    python tools/repeated_draws.py out/induction --draws 4
    python tools/repeated_draws.py out/induction --draws 4 --sequences 32

The tokens are drawn by the watch's own rule (`watch.measure.probesets.token_pool`), from the run's prepared training
split when it is here, as `sample.py --heads` does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from common.cli import run_cli  # noqa: E402
from common.errors import UsageError  # noqa: E402
from data.prepare import find_prepared  # noqa: E402
from formats import load_model  # noqa: E402
from watch.measure import probesets  # noqa: E402
from watch.measure.probesets import REACH, REPEATED, ProbeSets, draw_seed  # noqa: E402
from watch.measure.reading import measure, quick_sets  # noqa: E402

FIGURES = ("induction", "duplicate_token")


def draw(pool: probesets.TokenPool, block_size: int, seed: int, sequences: int) -> ProbeSets:
    """The repeated tokens and the repeats by distance of draw `seed` (the watch's draw 0 uses seeds 0 and 1)."""
    sets = ProbeSets()
    sets.add(REPEATED, probesets.repeated_tokens(pool, block_size, seed=draw_seed(seed, REPEATED), sequences=sequences))
    sets.add(REACH, probesets.repeats_by_distance(pool, block_size, seed=draw_seed(seed, REACH), sequences=sequences))
    return sets


def figures(results) -> str:
    """The figures of one pass, each with its spread."""
    out = []
    for name in FIGURES:
        found = results.best(name)
        if found is not None:
            head, value = found
            layer, index = int(head[1]), int(head[3:])
            out.append(f"{name} {head} {value:.3f} ± {float(results.heads[f'{name}_spread'][layer, index]):.3f}")
    numbers = results.numbers
    if "in_context_gain" in numbers:
        out.append(f"gain {numbers['in_context_gain']:+.3f} ± {numbers['in_context_gain_spread']:.3f}")
    return "; ".join(out)


def timings(model, sets: dict[str, ProbeSets], rounds: int = 7) -> dict[str, float]:
    """The median wall time of a pass over each of `sets`, the passes alternating round by round after one to warm
    up, on one thread: on a shared machine the other processes move every figure, and alternating moves them alike,
    so the ratios mean more than the times."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for each in sets.values():
        measure(model, each)
    times: dict[str, list[float]] = {name: [] for name in sets}
    for _ in range(rounds):
        for name, each in sets.items():
            start = time.perf_counter()
            measure(model, each)
            times[name].append(time.perf_counter() - start)
    torch.set_num_threads(threads)
    return {name: statistics.median(found) for name, found in times.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="the run's folder (or its ckpt.pt)")
    parser.add_argument("--draws", type=int, default=4, help="how many draws (0, 1, ...; the watch reads draw 0)")
    parser.add_argument("--sequences", type=int, default=probesets.REPEATED_SEQUENCES, help="sequences in a draw")
    parser.add_argument("--against", type=int, default=32, help="sequences of a draw to time beside it")
    args = parser.parse_args(argv)
    loaded = load_model(args.out_dir, torch.device("cpu"))
    model, tokenizer, checkpoint = loaded.model, loaded.tokenizer, loaded.checkpoint
    config = checkpoint.get("train_config") if isinstance(checkpoint.get("train_config"), dict) else {}
    prepared = find_prepared(checkpoint.get("data") or config, tokenizer.to_meta())
    if prepared is None:
        raise UsageError(f"the prepared data of {args.out_dir} is not here; the pool would be the whole vocabulary")
    pool = probesets.token_pool(prepared.tokens("train"), tokenizer, config.get("dataset"))
    print(f"{len(pool.tokens)} tokens drawn: {pool.rule}")
    block_size = model.config.block_size
    for seed in range(args.draws):
        sets = draw(pool, block_size, seed, args.sequences)
        print(f"draw {seed}: {figures(measure(model, sets))}")
    sets = draw(pool, block_size, 0, args.sequences)
    against = draw(pool, block_size, 0, args.against)
    found = timings(model, {"whole": sets, "quick": quick_sets(sets), "against": against})
    about = "; ".join(s.about for s in quick_sets(sets).sets.values())
    print(
        f"a pass over the repeated sets: {1000 * found['whole']:.0f} ms whole ({args.against} sequences: "
        f"{1000 * found['against']:.0f} ms), {1000 * found['quick']:.0f} ms quick ({about}); one thread"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, sys.argv[1:]))
