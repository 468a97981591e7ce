"""From raw measurements to results: medians with their spread over repeats, ratios against
nanoGPT from the same run, Markdown tables, and `bench/results.json` / `bench/RESULTS.md`.

Every figure is `{median, min, max, n, values}` over the repeats. A ratio is computed per
repeat (nanoGPT's run and ours from the same repeat) and then summarised the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from bench.harness import BENCH, SCRATCH, spread

RESULTS_JSON = BENCH / "results.json"
RESULTS_MD = BENCH / "RESULTS.md"
QUICK_JSON = SCRATCH / "results-quick.json"
QUICK_MD = SCRATCH / "RESULTS-quick.md"
SCHEMA = 2
KEEP_LAST = ("evals", "text_head", "command", "error", "target_val_loss")  # not summarised: the last repeat's


def aggregate(runs: Sequence[dict]) -> dict:
    """One unit's repeats: numbers become spreads, other values are kept (from the last repeat)."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[-1].get("error", "failed")}
    out: dict = {}
    for key in good[-1]:
        values = [r.get(key) for r in good]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None)
        if key in KEEP_LAST or not numeric or all(v is None for v in values):
            out[key] = values[-1]
        else:
            out[key] = spread(values)
    out["repeats"] = len(runs)
    if len(good) < len(runs):
        out["failed_repeats"] = len(runs) - len(good)
    return out


def paired(a_runs: Sequence[dict], b_runs: Sequence[dict], key_a: str, key_b: str | None = None) -> dict | None:
    """a[key_a] / b[key_b] per repeat, summarised."""
    key_b = key_b or key_a
    ratios = [
        a.get(key_a) / b.get(key_b)
        for a, b in zip(a_runs, b_runs, strict=False)
        if a.get(key_a) is not None and b.get(key_b) and "error" not in a and "error" not in b
    ]
    return spread(ratios)


def summarise(raw: dict[tuple[str, str], list[dict]]) -> dict:
    """Results by section (peak, recipe, target, sampling, startup, throughput) and the ratios."""
    results: dict = {}
    for (section, what), runs in raw.items():
        name = Path(what).stem if section == "throughput" else what  # a config's name, e.g. shakespeare_char
        results.setdefault(section, {})[name] = aggregate(runs)
    ratios = {}
    nano, ours = raw.get(("recipe", "nanogpt")), raw.get(("recipe", "ours"))
    if nano and ours:
        ratios["recipe_speedup"] = paired(nano, ours, "wall_s")  # nanoGPT's time / ours
        ratios["recipe_tokens_per_s"] = paired(ours, nano, "tokens_per_s")
    fast = raw.get(("target", "ours_fast"))
    if nano and fast:
        ratios["fast_target_vs_nanogpt_recipe"] = paired(fast, nano, "wall_s_at_target", "wall_s")
    if nano and ours:
        ratios["recipe_target_vs_nanogpt"] = paired(ours, nano, "wall_s_at_target")
    sample_nano, sample_ours = raw.get(("sampling", "nanogpt")), raw.get(("sampling", "ours"))
    if sample_nano and sample_ours:
        ratios["sampling_speedup"] = paired(sample_ours, sample_nano, "tokens_per_s")
    start_nano, start_ours = raw.get(("startup", "nanogpt")), raw.get(("startup", "ours"))
    if start_nano and start_ours:
        ratios["startup_ours_vs_nanogpt"] = paired(start_ours, start_nano, "wall_s")
    peak = results.get("peak", {}).get("matmul", {})
    for row in results.get("throughput", {}).values():
        _add_mfu(row, peak)
    if ratios:
        results["ratios"] = {k: v for k, v in ratios.items() if v is not None}
    return results


def _add_mfu(row: dict, peak: dict) -> None:
    """MFU against the peak of the dtype the run computed in (bf16 when it ran under bf16 autocast
    and a bf16 peak was measured, fp32 otherwise)."""
    if "error" in row or not peak or "error" in peak:
        return
    bf16 = row.get("compute_dtype") == "bfloat16" and peak.get("bf16_best_gflops")
    denominator = peak["bf16_best_gflops" if bf16 else "best_gflops"]["median"]
    row["peak_dtype"] = "bfloat16" if bf16 else "float32"
    row["mfu"] = spread([g / denominator for g in row["achieved_gflops"]["values"]])


# --- Markdown ----------------------------------------------------------------------------------


def figure(value: dict | float | None, digits: int = 1, unit: str = "") -> str:
    """A spread as "median (min-max, n=N)"; a plain number as itself."""
    if value is None:
        return "-"
    if not isinstance(value, dict):
        return f"{value:,.{digits}f}{unit}"
    text = f"{value['median']:,.{digits}f}{unit}"
    if value["n"] > 1:
        text += f" ({value['min']:,.{digits}f}-{value['max']:,.{digits}f}, n={value['n']})"
    return text


def scaled(value: dict, factor: float) -> dict:
    return {
        **value,
        **{k: value[k] * factor for k in ("median", "min", "max")},
        "values": [v * factor for v in value["values"]],
    }


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *["| " + " | ".join(row) + " |" for row in rows],
    ]


def side_by_side(results: dict) -> list[str]:
    """The comparison with nanoGPT, one row per figure."""
    recipe, target = results.get("recipe", {}), results.get("target", {})
    sampling, startup, ratios = results.get("sampling", {}), results.get("startup", {}), results.get("ratios", {})
    nano, ours, fast = recipe.get("nanogpt", {}), recipe.get("ours", {}), target.get("ours_fast", {})
    rows = []
    if nano or ours:
        steps = ours.get("final_step") or nano.get("final_step")
        rows += [
            [
                f"recipe, {figure(steps, 0)} steps: wall s, whole process",
                figure(nano.get("wall_s")),
                figure(ours.get("wall_s")),
                "speed-up " + figure(ratios.get("recipe_speedup"), 2, "x"),
            ],
            [
                "recipe: tokens/s over the whole process",
                figure(nano.get("tokens_per_s"), 0),
                figure(ours.get("tokens_per_s"), 0),
                figure(ratios.get("recipe_tokens_per_s"), 2, "x"),
            ],
            [
                "recipe: final val loss",
                figure(nano.get("final_val_loss"), 4),
                figure(ours.get("final_val_loss"), 4),
                "",
            ],
            [
                "recipe: median step ms (from nanoGPT's log / our in-process step)",
                figure(nano.get("step_ms"), 1),
                figure(results.get("throughput", {}).get("shakespeare_char", {}).get("ms_per_step"), 1),
                "",
            ],
            ["recipe: peak RSS MiB", figure(nano.get("max_rss_mb"), 0), figure(ours.get("max_rss_mb"), 0), ""],
            [
                f"wall s to val <= {_target(results)} (nanoGPT: its recipe; ours: the fast config)",
                figure(nano.get("wall_s_at_target")),
                figure(fast.get("wall_s_at_target")),
                figure(ratios.get("fast_target_vs_nanogpt_recipe"), 2, "x") + " of nanoGPT's recipe wall",
            ],
        ]
    if sampling:
        rows.append(
            [
                f"sampling tokens/s, {figure(sampling.get('ours', {}).get('new_tokens'), 0)} tokens in process",
                figure(sampling.get("nanogpt", {}).get("tokens_per_s"), 0),
                figure(sampling.get("ours", {}).get("tokens_per_s"), 0),
                figure(ratios.get("sampling_speedup"), 2, "x"),
            ]
        )
    if startup:
        rows.append(
            [
                "`sample.py` start-up, 1 token, whole process s",
                figure(startup.get("nanogpt", {}).get("wall_s"), 2),
                figure(startup.get("ours", {}).get("wall_s"), 2),
                figure(ratios.get("startup_ours_vs_nanogpt"), 2, "x") + " of nanoGPT's",
            ]
        )
    if not rows:
        return []
    return [
        "### Side by side with nanoGPT (same machine, same run, interleaved)",
        "",
        *table(["", "nanoGPT", "gptwatch", "ratio"], rows),
        "",
    ]


def _target(results: dict) -> float:
    return next(
        (
            r.get("target_val_loss")
            for section in ("recipe", "target")
            for r in results.get(section, {}).values()
            if r.get("target_val_loss")
        ),
        1.886,
    )


def throughput_table(results: dict) -> list[str]:
    rows = []
    for name, r in results.get("throughput", {}).items():
        if "error" in r:
            rows.append([name, r["error"], *[""] * 6])
            continue
        label = (
            name + "".join(f" {o}" for o in r.get("overrides", [])) + (" (random tokens)" if r.get("synthetic") else "")
        )
        mfu = figure(scaled(r["mfu"], 100), 1, "%") if r.get("mfu") else "-"
        rows.append(
            [
                label,
                r["model"],
                figure(r["tokens_per_step"], 0),
                figure(r["ms_per_step"], 2),
                figure(r["tokens_per_s"], 0),
                figure(r["achieved_gflops"], 1),
                mfu + (" of bf16" if r.get("peak_dtype") == "bfloat16" else ""),
                figure(r["max_rss_mb"], 0),
            ]
        )
    if not rows:
        return []
    peak = results.get("peak", {}).get("matmul", {})
    head = [
        f"### Training step, in process (median after warm-up; MFU of a {figure(peak.get('best_gflops'), 0)} "
        "GFLOP/s fp32 matmul peak)"
        if peak and "error" not in peak
        else "### Training step, in process",
        "",
    ]
    return [
        *head,
        *table(["config", "model", "tokens/step", "ms/step", "tokens/s", "GFLOP/s", "MFU", "peak RSS MiB"], rows),
        "",
    ]


def machine_lines(m: dict) -> list[str]:
    load = m.get("load_avg_start")
    return [
        f"- CPU: {m['cpu']}; {m['cores']} logical cores ({m['cores_usable']} usable)"
        + (f"; GPU: {m['cuda']}" if m.get("cuda") else ""),
        f"- torch {m['torch']}, {m['torch_threads']} threads; Python {m['python']}; {m['platform']}",
        f"- {m['date']}; commit {m.get('commit') or '-'}; load average at start "
        f"{' / '.join(str(x) for x in load) if load else '-'}",
    ]


def render_markdown(doc: dict | None, quick: bool = False) -> str:
    lines = [
        "# Benchmark results" + (" (quick smoke test: not real numbers)" if quick else ""),
        "",
        "Written by `bench/run.py` from `bench/results.json`; edits here are overwritten. Every figure is the",
        "median over the run's repeats, with the range and the number of repeats; every ratio is taken per",
        "repeat, nanoGPT's run and ours from the same repeat, then summarised. What each number means:",
        "bench/README.md.",
        "",
    ]
    if not doc or not doc.get("results"):
        return "\n".join([*lines, "No run recorded yet.", ""])
    lines += [
        f"From `{doc['command']}` ({doc['repeats']} repeats, {doc['total_wall_s'] / 60:.0f} min).",
        "",
        "## Machine",
        "",
        *machine_lines(doc["machine"]),
        "",
        "## Results",
        "",
    ]
    lines += side_by_side(doc["results"]) + throughput_table(doc["results"])
    return "\n".join(lines)


def save(doc: dict, quick: bool) -> Path:
    """A quick run goes to bench/out; a full run replaces results.json and RESULTS.md whole, so
    every figure there comes from one run."""
    json_path, md_path = (QUICK_JSON, QUICK_MD) if quick else (RESULTS_JSON, RESULTS_MD)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    md_path.write_text(render_markdown(doc, quick))
    return md_path
