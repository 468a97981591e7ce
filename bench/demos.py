"""The two demos, timed whole beside nanoGPT's CPU recipe on the same machine, with their floors.

    python bench/demos.py --repeats 3                  # each demo (seed 1337) 3 times, interleaved with nanoGPT
    python bench/demos.py --seeds 1337 1 2 3 4         # one run of each demo per seed: the seed table
    python bench/demos.py --only induction --seeds 1 2 # one demo

Each run is the README's command, `python train.py` (the default demo) or `python train.py
configs/induction.toml`, with `--seed=N` for another seed and its out_dir and TensorBoard folder under
bench/out/: wall time from process start to exit, and peak memory. Its floors are then read from the
checkpoint it wrote (untimed, `bench.workers.demo_floors`), its watch points and phase change from the
TensorBoard events it logged. nanoGPT's recipe (bench/nanogpt.py) runs once per repeat, and each
demo's ratio is its wall time over the recipe's in the same repeat. Writes bench/demos.json and
bench/DEMOS.md, whole, from this run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import nanogpt  # noqa: E402
from bench.harness import BENCH, SCRATCH, interleaved, log, machine_info, run_child, run_worker, spread  # noqa: E402
from bench.report import figure, table  # noqa: E402
from bench.run import FULL, train_nanogpt  # noqa: E402

DEMOS = {"default": [], "induction": ["configs/induction.toml"]}
GOALS = {"default": (12.0, 0.15), "induction": (60.0, 0.73)}  # whole-process seconds, and x nanoGPT's recipe
SENTENCE, REFERENT, DISTRACTOR = "The dog fetched the ball and she was happy", "dog", "ball"
PHASE_GAIN = 1.0  # nats/token: the in-context gain's first watch point at or above it marks the phase change
INDUCTION_FLOOR, GAIN_FLOOR = 0.70, 2.0  # the induction demo's floors: best induction score, in-context gain
DEFAULT_SEED = 1337
RESULTS_JSON, RESULTS_MD = BENCH / "demos.json", BENCH / "DEMOS.md"


def run_demo(demo: str, seed: int) -> dict:
    name = f"demo_{demo}_{seed}"
    out_dir, log_dir = SCRATCH / name, SCRATCH / "runs"
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(log_dir / name, ignore_errors=True)
    command = [
        sys.executable,
        "train.py",
        *DEMOS[demo],
        *([f"--seed={seed}"] if seed != DEFAULT_SEED else []),
        f"--out_dir={out_dir}",
        f"--log_dir={log_dir}",
        f"--run_name={name}",
    ]
    run = run_child(command, label=name, echo=lambda line: False)
    result = {"command": shlex.join(["python", *command[1:]]), "wall_s": run.wall_s, "max_rss_mb": run.max_rss_mb}
    if run.returncode != 0:
        return {
            **result,
            "error": f"train.py exited with status {run.returncode}: {run.lines[-1][1] if run.lines else ''}",
        }
    floors = run_worker(
        "demo_floors",
        {"ckpt": str(out_dir / "ckpt.pt"), "demo": demo, "sentence": SENTENCE, "words": [REFERENT, DISTRACTOR]},
        f"floors {name}",
    )
    floors.pop("max_rss_mb", None)
    floors.pop("process_wall_s", None)
    return {**result, **floors, **watched(log_dir / name, run.started_at)}


def watched(run_dir: Path, started_at: float) -> dict:
    """How many watch points the run logged, and its phase change: the first watch point where the
    in-context gain reached PHASE_GAIN (step, and seconds from the process's start)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    gains = events.Scalars("heads/in_context_gain") if "heads/in_context_gain" in events.Tags()["scalars"] else []
    phase = next((e for e in gains if e.value >= PHASE_GAIN), None)
    return {
        "watch_points": len(gains),
        "phase_step": phase.step if phase else None,
        "phase_s": phase.wall_time - started_at if phase else None,
    }


def summarise(raw: dict) -> dict:
    nano = raw.get(("nanogpt", "recipe"), [])
    out = {"nanogpt_recipe_wall_s": spread([r.get("wall_s") for r in nano if "error" not in r])}
    for (demo, seed), runs in raw.items():
        if demo == "nanogpt":
            continue
        good = [r for r in runs if "error" not in r]
        ratios = [
            r["wall_s"] / n["wall_s"] for r, n in zip(runs, nano, strict=False) if "error" not in r and "error" not in n
        ]
        out[f"{demo}:{seed}"] = {
            **(good[-1] if good else runs[-1]),
            "wall_s": spread([r["wall_s"] for r in good]),
            "x_nanogpt": spread(ratios),
            "repeats": len(runs),
            "failed": len(runs) - len(good),
        }
    return out


def render(doc: dict) -> str:
    results = doc["results"]
    lines = [
        "# The demos, timed beside nanoGPT's recipe",
        "",
        f"Written by `bench/demos.py` from `bench/demos.json`. From `{doc['command']}` on "
        f"{doc['machine']['cpu']} ({doc['machine']['cores']} cores), {doc['machine']['date']}, commit "
        f"{doc['machine'].get('commit') or '-'}; load average at start "
        f"{' / '.join(str(x) for x in doc['machine']['load_avg_start'] or [])}.",
        "",
        f"nanoGPT's CPU recipe, whole process: {figure(results['nanogpt_recipe_wall_s'])} s.",
        "",
    ]
    default = [
        [
            seed,
            figure(r["wall_s"]),
            figure(r["x_nanogpt"], 3, "x"),
            f"{r['best_head']} {r['referent']:.3f}",
            f"{r['attention'][REFERENT]:.2f} ({DISTRACTOR} {r['attention'][DISTRACTOR]:.2f})",
            f"{r['continuation']:.3f}",
            f"{100 * (r['continuation_ablated'] - r['continuation']):+.1f} points",
            str(r["watch_points"]),
        ]
        for seed, r in _rows(results, "default")
    ]
    if default:
        goal = GOALS["default"]
        lines += [
            f"## The default demo (goal: at most {goal[0]:g} s and {goal[1]:g}x nanoGPT's recipe)",
            "",
            *table(
                [
                    "seed",
                    "wall s",
                    "x nanoGPT",
                    "best head, referent (>= 0.90)",
                    f"`she` -> `{REFERENT}` (>= 0.88)",
                    "continuation (>= 0.95)",
                    "best head removed (>= 30)",
                    "watch points (>= 25)",
                ],
                default,
            ),
            "",
        ]
    induction = [
        [
            seed,
            figure(r["wall_s"]),
            figure(r["x_nanogpt"], 3, "x"),
            f"{r['phase_step']} / {r['phase_s']:.1f} s" if r["phase_step"] else "none",
            f"{r['best_induction_head']} {judged(r['induction'], r.get('induction_spread'), INDUCTION_FLOOR)}",
            judged(r["gain"], r.get("gain_spread"), GAIN_FLOOR),
            f"{100 * (1 - r['gain_without_top_two'] / r['gain']):.0f}%",
            f"{r['previous_token_head']} {r['previous_token']:.2f}" if r["previous_token_head"] else "none",
            f"{100 * (1 - r['gain_without_previous_token_head'] / r['gain']):.0f}%"
            if r["previous_token_head"]
            else "-",
        ]
        for seed, r in _rows(results, "induction")
    ]
    if induction:
        goal = GOALS["induction"]
        lines += [
            f"## The induction demo (goal: at most {goal[0]:g} s and {goal[1]:g}x nanoGPT's recipe)",
            "",
            *table(
                [
                    "seed",
                    "wall s",
                    "x nanoGPT",
                    f"phase change (gain >= {PHASE_GAIN:g}): step / s",
                    f"induction (>= {INDUCTION_FLOOR:.2f})",
                    f"in-context gain (>= {GAIN_FLOOR:.1f})",
                    "top two removed (>= 80%)",
                    "previous-token head (>= 0.5)",
                    "it removed (>= 50%)",
                ],
                induction,
            ),
            "",
        ]
    failed = [f"{key}: {r['error']}" for key, r in results.items() if isinstance(r, dict) and r.get("error")]
    return "\n".join([*lines, *(f"- failed: {f}" for f in failed), ""])


def judged(value: float, spread: float | None, floor: float) -> str:
    """A figure read from random sequences against its floor, "0.952 ± 0.004": it holds when the whole spread is at or
    above the floor, so another draw would hold it too; otherwise the row says "below" (the whole spread is) or
    "within its spread" (a draw could land on either side)."""
    if spread is None:  # a result from before figures had their spread
        return f"{value:.2f}"
    shown = f"{value:.3f} ± {spread:.3f}"
    if value - spread >= floor:
        return shown
    return f"{shown} ({'below' if value + spread < floor else 'within its spread'})"


def _rows(results: dict, demo: str) -> list[tuple[str, dict]]:
    return [(key.split(":")[1], r) for key, r in results.items() if key.startswith(f"{demo}:") and "error" not in r]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1, help="run every unit N times, interleaved (default 1)")
    p.add_argument("--seeds", type=int, nargs="+", default=[DEFAULT_SEED], help="seeds of each demo (default 1337)")
    p.add_argument("--only", nargs="+", choices=tuple(DEMOS), default=list(DEMOS), help="demos to run (default both)")
    args = p.parse_args(argv)
    missing = nanogpt.available()
    if missing:
        raise SystemExit(f"error: cannot run nanoGPT's recipe beside the demos: {missing}")
    nanogpt.prepare()
    machine = machine_info()
    units = [("nanogpt", "recipe"), *((demo, seed) for demo in args.only for seed in args.seeds)]
    command = shlex.join(["python", "bench/demos.py", *argv])
    log(f"{command}: {len(units)} units x {args.repeats} repeat(s)")
    started = time.perf_counter()
    raw = interleaved(
        units,
        args.repeats,
        lambda unit: train_nanogpt(FULL) if unit[0] == "nanogpt" else run_demo(unit[0], int(unit[1])),
    )
    doc = {
        "command": command,
        "repeats": args.repeats,
        "total_wall_s": time.perf_counter() - started,
        "machine": machine,
        "results": summarise(raw),
        "raw": {f"{d}:{s}": runs for (d, s), runs in raw.items()},
    }
    RESULTS_JSON.write_text(json.dumps(doc, indent=1) + "\n")
    RESULTS_MD.write_text(render(doc))
    log("\n" + render(doc))
    return 1 if any("error" in r for runs in raw.values() for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
