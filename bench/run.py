"""Benchmarks, side by side with nanoGPT on the same machine in the same run.

    python bench/run.py [--repeats N] [--quick] [--only SECTION ...] [--json PATH]

SECTION is one of:
- recipe: nanoGPT's CPU recipe (its own train.py, from ../shared/anchors/nanogpt) and
  `python train.py configs/shakespeare_char.toml`, whole processes, 2000 steps each;
- target: `python train.py configs/shakespeare_char_fast.toml`, the time to val <= 1.886;
- sampling: 500 tokens in process, nanoGPT's `generate` and ours, from the recipe checkpoints;
- startup: both `sample.py`s for one token, whole processes;
- throughput: our training step in process (median ms, tokens/s, MFU against the peak);
- peak: the fp32 matmul peak of this machine (bf16 too on CUDA).

Every unit runs in a child process of its own; with --repeats N they run N times, interleaved
(A B C, C B A, ...). A full run writes bench/results.json and bench/RESULTS.md; --quick (tiny
step counts, a smoke test of the harness) writes bench/out/ instead. bench/README.md says
what each number means.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import nanogpt, report  # noqa: E402
from bench.harness import REPO, SCRATCH, interleaved, log, machine_info, run_child, run_worker  # noqa: E402

SECTIONS = ("peak", "throughput", "recipe", "target", "sampling", "startup")
RECIPE_CONFIG = "configs/shakespeare_char.toml"
FAST_CONFIG = "configs/shakespeare_char_fast.toml"
THROUGHPUT_CONFIGS = (RECIPE_CONFIG, "configs/pronouns.toml")
TARGET_VAL_LOSS = 1.886
OURS_RECIPE_OUT = "out/bench_recipe"
NANO_RECIPE_OUT = "out-recipe"  # inside nanoGPT's scratch copy
PROGRESS_BAR = re.compile(r"^\s*train:\s+\d+%")


@dataclass
class Settings:
    repeats: int
    max_iters: int  # 0: the configs' own (2000 for the recipe)
    eval_interval: int  # 0: the configs' own
    throughput_warmup: int
    throughput_steps: int
    peak_reps: int
    sample_tokens: int
    sample_runs: int
    quick: bool = False


FULL = Settings(
    repeats=1,
    max_iters=0,
    eval_interval=0,
    throughput_warmup=20,
    throughput_steps=200,
    peak_reps=10,
    sample_tokens=500,
    sample_runs=5,
)
QUICK = Settings(
    repeats=1,
    max_iters=60,
    eval_interval=30,
    throughput_warmup=5,
    throughput_steps=30,
    peak_reps=3,
    sample_tokens=50,
    sample_runs=2,
    quick=True,
)


# --- units ------------------------------------------------------------------------------------------


def train_ours(config: str, out_dir: str, settings: Settings, *extra: str) -> dict:
    """`python train.py CONFIG` as users run it, from a fresh out_dir; its evaluations read back
    from the TensorBoard events it logged, placed in time from the process's start."""
    name = Path(out_dir).name
    log_dir = SCRATCH / "runs"
    shutil.rmtree(REPO / out_dir, ignore_errors=True)
    shutil.rmtree(log_dir / name, ignore_errors=True)
    command = [
        sys.executable,
        "train.py",
        config,
        f"--out_dir={out_dir}",
        f"--log_dir={log_dir}",
        f"--run_name={name}",
        *extra,
    ]
    if settings.max_iters:
        command += [f"--max_iters={settings.max_iters}", f"--lr_decay_iters={settings.max_iters}"]
    if settings.eval_interval:
        command.append(f"--eval_interval={settings.eval_interval}")
    run = run_child(command, label=name, echo=lambda line: not PROGRESS_BAR.match(line))
    result = {"command": shlex.join(["python", *command[1:]]), "wall_s": run.wall_s, "max_rss_mb": run.max_rss_mb}
    if run.returncode != 0:
        return {**result, "error": f"train.py exited with status {run.returncode}"}
    from bench.harness import load_config

    cfg = load_config(REPO / config, command[3:])
    evals = _logged_evaluations(log_dir / name, run.started_at)
    return {
        **result,
        **_training_summary(evals, cfg.max_iters, cfg.batch_size * cfg.model.block_size * cfg.grad_accum, run.wall_s),
    }


def _logged_evaluations(run_dir: Path, started_at: float) -> list[dict]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    train = {e.step: e.value for e in events.Scalars("loss/train_eval")}
    return [
        {"step": e.step, "train_loss": train.get(e.step), "val_loss": e.value, "wall_s": e.wall_time - started_at}
        for e in events.Scalars("loss/val")
    ]


def _training_summary(evals: list[dict], steps: int, tokens_per_step: int, wall_s: float) -> dict:
    hit = next((e for e in evals if e["val_loss"] <= TARGET_VAL_LOSS), None)
    last = evals[-1] if evals else {}
    return {
        "final_step": last.get("step"),
        "final_val_loss": last.get("val_loss"),
        "evals": evals,
        "tokens_per_s": steps * tokens_per_step / wall_s,
        "target_val_loss": TARGET_VAL_LOSS,
        "reached": hit is not None,
        "step_at_target": hit and hit["step"],
        "wall_s_at_target": hit and hit["wall_s"],
    }


def train_nanogpt(settings: Settings) -> dict:
    shutil.rmtree(nanogpt.HOME / NANO_RECIPE_OUT, ignore_errors=True)
    command = nanogpt.train_command(NANO_RECIPE_OUT, settings.max_iters, settings.eval_interval)
    run = run_child(command, cwd=nanogpt.HOME, label="nanoGPT", echo=lambda line: not line.startswith("iter "))
    result = {"command": shlex.join(["python", *command[1:]]), "wall_s": run.wall_s, "max_rss_mb": run.max_rss_mb}
    if run.returncode != 0:
        return {**result, "error": f"nanoGPT's train.py exited with status {run.returncode}"}
    parsed = nanogpt.parse_training(run.lines)
    steps = settings.max_iters or 2000
    summary = _training_summary(parsed["evals"], steps, nanogpt.RECIPE_TOKENS_PER_STEP, run.wall_s)
    step_ms = sorted(parsed["step_ms"])
    return {**result, **summary, "step_ms": step_ms[len(step_ms) // 2] if step_ms else None}


def startup(command: list[str], cwd: Path, label: str) -> dict:
    run = run_child(command, cwd=cwd, label=label, echo=lambda line: False)
    if run.returncode != 0:
        return {"error": f"{label} exited with status {run.returncode}: {run.lines[-1][1] if run.lines else ''}"}
    return {"command": shlex.join(["python", *command[1:]]), "wall_s": run.wall_s, "max_rss_mb": run.max_rss_mb}


def measure(unit: tuple[str, str], args: argparse.Namespace, settings: Settings) -> dict:
    section, what = unit
    sample = {
        "tokens": settings.sample_tokens,
        "runs": settings.sample_runs,
        "prompt": "\n",
        "temperature": 0.8,
        "top_k": 200,
    }
    if section == "peak":
        return run_worker("peak", {"n": 2048, "warmup": 3, "reps": settings.peak_reps})
    if section == "throughput":
        return run_worker(
            "throughput",
            {
                "config": what,
                "overrides": args.overrides,
                "synthetic": args.synthetic,
                "warmup": settings.throughput_warmup,
                "steps": settings.throughput_steps,
            },
        )
    if (section, what) == ("recipe", "nanogpt"):
        return train_nanogpt(settings)
    if (section, what) == ("recipe", "ours"):
        return train_ours(RECIPE_CONFIG, OURS_RECIPE_OUT, settings)
    if (section, what) == ("target", "ours_fast"):
        return train_ours(FAST_CONFIG, "out/bench_fast", settings)
    if (section, what) == ("sampling", "ours"):
        return run_worker("sampling", {**sample, "ckpt": f"{OURS_RECIPE_OUT}/ckpt.pt"}, "sampling ours")
    if (section, what) == ("sampling", "nanogpt"):
        return run_worker(
            "nanogpt_sampling",
            {**sample, "home": str(nanogpt.HOME), "ckpt": str(nanogpt.HOME / NANO_RECIPE_OUT / "ckpt.pt")},
            "sampling nanoGPT",
        )
    if (section, what) == ("startup", "ours"):
        return startup(
            [sys.executable, "sample.py", f"--out_dir={OURS_RECIPE_OUT}", "--max_new_tokens=1"], REPO, "sample.py"
        )
    if (section, what) == ("startup", "nanogpt"):
        return startup(nanogpt.sample_command(NANO_RECIPE_OUT, 1), nanogpt.HOME, "nanoGPT sample.py")
    raise ValueError(f"unknown unit {unit}")


def plan(args: argparse.Namespace) -> list[tuple[str, str]]:
    selected = args.only or SECTIONS
    units = []
    if "peak" in selected or "throughput" in selected:
        units.append(("peak", "matmul"))
    units += [("throughput", c) for c in (*THROUGHPUT_CONFIGS, *args.config) if "throughput" in selected]
    units += [("recipe", "nanogpt"), ("recipe", "ours")] if "recipe" in selected else []
    units += [("target", "ours_fast")] if "target" in selected else []
    units += [("sampling", "nanogpt"), ("sampling", "ours")] if "sampling" in selected else []
    units += [("startup", "nanogpt"), ("startup", "ours")] if "startup" in selected else []
    return list(dict.fromkeys(units))


def needs_nanogpt(units: list[tuple[str, str]]) -> bool:
    return any(what == "nanogpt" for _, what in units)


def ensure_checkpoints(units: list[tuple[str, str]], settings: Settings) -> None:
    """Sampling and start-up read the recipe checkpoints; train them (untimed) when the run does not."""
    if not any(section in ("sampling", "startup") for section, _ in units):
        return
    if ("recipe", "ours") not in units and not (REPO / OURS_RECIPE_OUT / "ckpt.pt").is_file():
        log("training our recipe checkpoint for sampling (not timed)")
        train_ours(RECIPE_CONFIG, OURS_RECIPE_OUT, settings)
    if ("recipe", "nanogpt") not in units:
        log("training nanoGPT's recipe checkpoint for sampling (not timed)")
        train_nanogpt(settings)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1, help="run every unit N times, interleaved (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny step counts: a smoke test of the harness, not numbers")
    p.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION", help=", ".join(SECTIONS))
    p.add_argument("--json", metavar="PATH", help="also write this run's JSON here")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="TOML",
        help="another config for the throughput section (repeatable)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a config key in every throughput run (repeatable), e.g. --set compile=true",
    )
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="throughput on random tokens (vocabulary 50304 for gpt2 configs, 256 for char)",
    )
    p.add_argument("--steps", type=int, help="timed steps per throughput run (default 200; 30 quick)")
    p.add_argument("--warmup", type=int, help="untimed steps before those (default 20; 5 quick)")
    p.add_argument("--render", action="store_true", help="only rewrite bench/RESULTS.md from bench/results.json")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.render:
        doc = json.loads(report.RESULTS_JSON.read_text()) if report.RESULTS_JSON.is_file() else None
        report.RESULTS_MD.write_text(report.render_markdown(doc))
        return 0
    if args.repeats < 1:
        raise SystemExit("error: --repeats must be at least 1")
    settings = QUICK if args.quick else FULL
    settings = Settings(
        **{
            **asdict(settings),
            "repeats": args.repeats,
            **({"throughput_steps": args.steps} if args.steps else {}),
            **({"throughput_warmup": args.warmup} if args.warmup is not None else {}),
        }
    )
    args.config = [_relative(c) for c in args.config]
    args.overrides = [f"--{o.removeprefix('--')}" for o in args.overrides]  # as train.py spells them
    _check_overrides([*THROUGHPUT_CONFIGS, *args.config], args.overrides)
    units = plan(args)
    if needs_nanogpt(units):
        missing = nanogpt.available()
        if missing:
            raise SystemExit(f"error: cannot run nanoGPT beside ours: {missing}; run with --only throughput peak")
        nanogpt.prepare()
    machine = machine_info()
    if machine["load_avg_start"] and machine["load_avg_start"][0] >= 0.5:
        log(
            f"warning: load average {machine['load_avg_start'][0]} at start: the machine is not idle, so these "
            f"numbers will be slow and noisy"
        )
    command = shlex.join(["python", "bench/run.py", *argv])
    log(f"{command}: {len(units)} units x {args.repeats} repeat(s)")
    ensure_checkpoints(units, settings)
    started = time.perf_counter()
    raw = interleaved(units, args.repeats, lambda unit: measure(unit, args, settings))
    machine["load_avg_end"] = machine_info()["load_avg_start"]
    doc = {
        "schema": report.SCHEMA,
        "command": command,
        "repeats": args.repeats,
        "settings": asdict(settings),
        "total_wall_s": time.perf_counter() - started,
        "machine": machine,
        "results": report.summarise(raw),
        "raw": {f"{s}:{w}": runs for (s, w), runs in raw.items()},
    }
    written = report.save(doc, settings.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    log("\n" + report.render_markdown(doc, settings.quick))
    log(f"wrote {written.relative_to(REPO)}")
    failed = [f"{s} {w}" for (s, w), runs in raw.items() if any("error" in r for r in runs)]
    if failed:
        log(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


def _relative(path: str) -> str:
    """A path given on the command line, as the child processes (run in the repository) see it."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPO))
    except ValueError:
        return str(resolved)


def _check_overrides(configs: list[str], overrides: list[str]) -> None:
    """A bad --set is refused here, in one line, rather than in every child."""
    if not overrides:
        return
    from bench.harness import load_config
    from common.errors import UsageError

    for config in configs:
        try:
            load_config(REPO / config, overrides)
        except UsageError as exc:
            raise SystemExit(f"error: --set with {config}: {exc}") from None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
