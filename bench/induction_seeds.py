"""The induction demo's seed table, from a folder of finished runs: each run's floors read from its checkpoint with
the watch's own measures (`bench.workers.demo_floors`, on the draw of random sequences floors are judged on), and its
phase change from its TensorBoard events.

    python bench/induction_seeds.py /work/runs45              # every run in the folder, as a Markdown table
    python bench/induction_seeds.py /work/runs45 --json runs.json

The folder holds one run per seed and thread count, `s<seed>t<threads>/ckpt.pt`, with its TensorBoard events under
`tb/s<seed>t<threads>/`, as from

    python train.py configs/induction.toml --seed=S --out_dir=RUNS/sSt1 --log_dir=RUNS/tb/sSt1   # 1 thread

A floor read from random sequences (the induction score, the in-context gain) holds when the figure less its spread
is at or above it (`bench.demos.judged`); the phase change is the first watch point whose in-context gain on repeated
tokens is at least `bench.demos.PHASE_GAIN` nats/token.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.demos import GAIN_FLOOR, INDUCTION_FLOOR, PHASE_GAIN, judged  # noqa: E402
from bench.report import table  # noqa: E402
from bench.workers import demo_floors  # noqa: E402

RUN = re.compile(r"s(\d+)t(\d+)")
TOP_TWO_FLOOR, PREVIOUS_FLOOR, PREVIOUS_REMOVED_FLOOR = 0.80, 0.5, 0.50  # the other floors of docs/results.md
HEAD_RUN = re.compile(r"L\d+H\d+")  # a head's own TensorBoard run, beside the run's


def phase_change(tb: Path) -> dict:
    """The first watch point at which the in-context gain reached PHASE_GAIN (its step, and seconds after the run's
    first event), and how many watch points the run logged; from the run's own events under `tb` (not a head's)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folders = sorted({f.parent for f in tb.rglob("events.out.tfevents.*") if not HEAD_RUN.fullmatch(f.parent.name)})
    for folder in folders:
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
        if "heads/in_context_gain" not in events.Tags()["scalars"]:
            continue
        gains = events.Scalars("heads/in_context_gain")
        start = min(e.wall_time for tag in events.Tags()["scalars"] for e in events.Scalars(tag))
        phase = next((e for e in gains if e.value >= PHASE_GAIN), None)
        return {
            "watch_points": len(gains),
            "phase_step": phase.step if phase else None,
            "phase_s": phase.wall_time - start if phase else None,
        }
    return {"watch_points": 0, "phase_step": None, "phase_s": None}


def runs(folder: Path) -> list[tuple[int, int, Path]]:
    """(seed, threads, run folder) of every finished run in `folder`, by seed then threads."""
    found = [(RUN.fullmatch(p.name), p) for p in folder.iterdir() if p.is_dir()]
    done = [(int(m[1]), int(m[2]), p) for m, p in found if m and (p / "ckpt.pt").is_file()]
    return sorted(done)


def read_run(folder: Path, seed: int, threads: int, run: Path) -> dict:
    floors = demo_floors({"ckpt": str(run / "ckpt.pt"), "demo": "induction"})
    return {"seed": seed, "threads": threads, **floors, **phase_change(folder / "tb" / run.name)}


def holds(r: dict) -> dict[str, bool]:
    """Which floors a run meets (those read from random sequences on their whole spread)."""
    previous = r["previous_token_head"] is not None
    return {
        "induction": r["induction"] - r["induction_spread"] >= INDUCTION_FLOOR,
        "gain": r["gain"] - r["gain_spread"] >= GAIN_FLOOR,
        "top_two": 1 - r["gain_without_top_two"] / r["gain"] >= TOP_TWO_FLOOR,
        "previous_token": previous and r["previous_token"] >= PREVIOUS_FLOOR,
        "previous_removed": previous
        and 1 - r["gain_without_previous_token_head"] / r["gain"] >= PREVIOUS_REMOVED_FLOOR,
    }


def render(rows: list[dict]) -> list[str]:
    """The Markdown table, then how many runs meet each floor."""
    body = [
        [
            str(r["seed"]),
            str(r["threads"]),
            f"{r['phase_step']} / {r['phase_s']:.1f} s" if r["phase_step"] is not None else "none",
            f"{r['best_induction_head']} {judged(r['induction'], r['induction_spread'], INDUCTION_FLOOR)}",
            judged(r["gain"], r["gain_spread"], GAIN_FLOOR),
            f"{100 * (1 - r['gain_without_top_two'] / r['gain']):.0f}%",
            f"{r['previous_token_head']} {r['previous_token']:.2f}" if r["previous_token_head"] else "none",
            f"{100 * (1 - r['gain_without_previous_token_head'] / r['gain']):.0f}%"
            if r["previous_token_head"]
            else "-",
        ]
        for r in rows
    ]
    columns = [
        "seed",
        "threads",
        f"phase change (gain >= {PHASE_GAIN:g}): step / s",
        f"induction (>= {INDUCTION_FLOOR:.2f})",
        f"in-context gain (>= {GAIN_FLOOR:g})",
        f"top two removed (>= {100 * TOP_TWO_FLOOR:.0f}%)",
        f"previous-token head (>= {PREVIOUS_FLOOR:g})",
        f"it removed (>= {100 * PREVIOUS_REMOVED_FLOOR:.0f}%)",
    ]
    met = [holds(r) for r in rows]
    counts = ", ".join(f"{name.replace('_', ' ')} {sum(m[name] for m in met)}" for name in (met[0] if met else {}))
    every = sum(all(m.values()) for m in met)
    return [*table(columns, body), "", f"{every} of {len(rows)} runs meet every floor; each floor: {counts}."]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the runs: s<seed>t<threads>/ckpt.pt and tb/s<seed>t<threads>/")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    args = parser.parse_args(argv)
    found = runs(args.folder)
    if not found:
        raise SystemExit(f"error: no finished run (s<seed>t<threads>/ckpt.pt) in {args.folder}")
    rows = [read_run(args.folder, seed, threads, run) for seed, threads, run in found]
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(render(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
