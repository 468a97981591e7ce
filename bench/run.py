"""Benchmarks: training throughput and MFU, time to a target val loss, sampling speed, peak memory.

    python bench/run.py [--quick] [--only NAME ...] [--repeats N] [--json PATH]

NAME is one of peak, throughput, time_to_target, sampling (default: all; throughput also
measures the peak it divides by). One JSON object goes to stdout, a summary to stderr.
A full run merges its sections into bench/results.json and rewrites bench/RESULTS.md from
it; a --quick run writes bench/out/results-quick.json and bench/out/RESULTS-quick.md instead,
so a smoke test never replaces real numbers. See bench/README.md.

Every measurement runs in a child process of its own (`--worker NAME` for the in-process
ones, train.py itself for time to target), so each reports its own peak resident memory
and none inherits another's allocator state or warm caches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCRATCH = BENCH / "out"
RESULTS_JSON = BENCH / "results.json"
RESULTS_MD = BENCH / "RESULTS.md"
QUICK_JSON = SCRATCH / "results-quick.json"
QUICK_MD = SCRATCH / "RESULTS-quick.md"
SCHEMA = 1

BENCHMARKS = ("peak", "throughput", "time_to_target", "sampling")
# A side-by-side baseline: the recipe run with nanoGPT's optimizer setting on a CPU.
BASELINE = "nanogpt_adamw"
BASELINE_KEY = f"{BASELINE}:configs/shakespeare_char.toml"
THROUGHPUT_CONFIGS = ("configs/shakespeare_char.toml", "configs/pronouns.toml")
TARGET_CONFIGS = ("configs/shakespeare_char.toml", "configs/shakespeare_char_fast.toml")
SAMPLING_CONFIG = "configs/shakespeare_char.toml"  # trained when sampling finds no checkpoint
TARGET_VAL_LOSS = 1.886
RESULT_PREFIX = "@@bench-result "

# nanoGPT's shakespeare_char CPU recipe (4 layers x 4 heads x 128 dims, block 64, batch 12,
# 2000 steps), measured on the machine these benchmarks were first written for. Ratios in
# the results are ours / nanoGPT's; they only mean something when both ran on the same CPU.
REFERENCE = {
    "what": "nanoGPT shakespeare_char CPU recipe (n_layer=4 n_head=4 n_embd=128 block_size=64 batch_size=12)",
    "ms_per_step": 77.0,
    "tokens_per_s": 9900.0,
    "max_iters": 2000,
    "wall_s": 171.0,
    "val_loss": 1.886,
    "val_loss_step": 2000,
    "mfu": 0.43,
    "peak_gflops": 120.0,
    "sample_tokens_per_s_no_cache": 220.0,
}


@dataclass
class Settings:
    warmup: int          # optimizer steps run before timing starts
    steps: int           # timed optimizer steps per throughput run
    peak_n: int          # square matrix size of the peak matmul
    peak_warmup: int
    peak_reps: int
    max_iters: int       # 0: the config's own max_iters for time to target
    eval_interval: int   # 0: the config's own eval_interval
    sample_tokens: int
    sample_runs: int
    train_overrides: tuple[str, ...] = ()  # extra train.py flags for time to target


FULL = Settings(warmup=20, steps=200, peak_n=2048, peak_warmup=3, peak_reps=10, max_iters=0, eval_interval=100,
                sample_tokens=500, sample_runs=7)
# Quick evaluations are cut down too (fewer batches, no text sample): on a busy 2-core machine a
# full one takes longer than the 60 training steps around it.
QUICK = Settings(warmup=5, steps=30, peak_n=2048, peak_warmup=1, peak_reps=3, max_iters=60, eval_interval=30,
                 sample_tokens=100, sample_runs=3, train_overrides=("--eval_iters=4", "--sample_tokens=0"))


def log(message: str = "") -> None:
    print(message, file=sys.stderr, flush=True)


# --- workers: one measurement each, run as `python bench/run.py --worker NAME` ------------------


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def worker_peak(args: dict) -> dict:
    """Best matmul rate on this machine, the denominator of MFU: fp32 everywhere, and bf16
    on CUDA, where training runs under bf16 autocast (TF32 stays off for the fp32 figure)."""
    import torch

    from trainer.runtime import pick_device

    device = pick_device("auto")
    # A 2048 matmul keeps a CPU busy; a GPU needs bigger ones to reach its peak.
    n = args["n"] if device.type != "cuda" else max(args["n"], 8192)

    def best_rate(dtype: torch.dtype) -> tuple[float, float]:
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        for _ in range(args["warmup"]):
            torch.mm(a, b, out=out)
        _sync(device)
        rates = []
        for _ in range(args["reps"]):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            _sync(device)
            rates.append(2 * n**3 / (time.perf_counter() - t0) / 1e9)
        # The best repetition is the one least disturbed by anything else on the machine.
        return max(rates), statistics.median(rates)

    best, median = best_rate(torch.float32)
    result = {"device": str(device), "dtype": "float32", "n": n, "reps": args["reps"],
              "threads": torch.get_num_threads(), "best_gflops": best, "median_gflops": median}
    if device.type == "cuda":
        result["bf16_best_gflops"], result["bf16_median_gflops"] = best_rate(torch.bfloat16)
    return result


def flops_per_token(model) -> dict:
    """Training FLOPs per token, the PaLM (appendix B) / nanoGPT estimate:

        6 * N + 12 * n_layer * n_embd * block_size

    N counts the weights that take part in a matmul for every token: all parameters except
    the token and position embeddings (a lookup, not a matmul), plus the output head
    n_embd * vocab, which is a full matmul even though it shares the token embedding's
    weights. Each such weight costs 2 FLOPs forward and 4 backward. The second term is
    attention's scores and weighted sum (2 matmuls x 2 FLOPs x 3 for backward), counted over
    the whole block without halving for the causal mask, as the references do, so MFU
    compares with nanoGPT's figure.
    """
    cfg = model.config
    embeddings = model.wte.weight.numel() + (model.wpe.weight.numel() if model.wpe is not None else 0)
    non_embedding = sum(p.numel() for p in model.parameters()) - embeddings  # tied head: counted once here
    head = cfg.n_embd * cfg.vocab_size
    attention = 12 * cfg.n_layer * cfg.n_embd * cfg.block_size
    return {"params": sum(p.numel() for p in model.parameters()), "non_embedding_params": non_embedding,
            "flops_per_token": 6 * (non_embedding + head) + attention}


# Vocabularies of synthetic batches: GPT-2's 50,257 tokens padded to a multiple of 64 (what
# a full-vocabulary GPT-2 run uses), or bytes for a character-level config.
SYNTHETIC_VOCAB = {"gpt2": 50304, "char": 256}


class SyntheticBatches:
    """Uniformly random tokens made on the device: throughput without preparing a corpus
    (a GPU machine may have no copy of it), at the vocabulary size that sets the head's cost."""

    def __init__(self, vocab_size: int, block_size: int, batch_size: int, device) -> None:
        import torch

        self.shape, self.vocab_size, self.device = (batch_size, block_size + 1), vocab_size, device
        self.generator = torch.Generator(device=device).manual_seed(0)

    def train(self):
        import torch

        windows = torch.randint(self.vocab_size, self.shape, device=self.device, generator=self.generator)
        return windows[:, :-1], windows[:, 1:]


def worker_throughput(args: dict) -> dict:
    """Median time of a full optimizer step, built exactly as train.py builds it."""
    import torch

    from data.batches import Batches
    from data.prepare import prepare
    from model import GPT
    from train import model_config
    from trainer import runtime as rt_mod
    from trainer.config import load_config
    from trainer.optim import lr_at, make_optimizer, set_lr

    cfg = load_config(args["config"], args.get("overrides", []))
    rt = rt_mod.setup(cfg)
    try:
        torch.manual_seed(cfg.seed + rt.rank)
        if args.get("synthetic"):
            vocab_size = SYNTHETIC_VOCAB[cfg.tokenizer]
            batches = SyntheticBatches(vocab_size, cfg.block_size, cfg.batch_size, rt.device)
        else:
            prepared = prepare(cfg.dataset, cfg.tokenizer, cfg.data_dir, cfg.val_fraction, cfg.corpus_sentences,
                               quiet=True)
            vocab_size = prepared.tokenizer.vocab_size
            batches = Batches(prepared, cfg.block_size, cfg.batch_size, rt.device, cfg.seed, rt.rank)
        raw_model = GPT(model_config(cfg, vocab_size)).to(rt.device)
        optimizer = make_optimizer(raw_model, cfg, rt.device)
        if args.get("baseline") == BASELINE:
            # nanoGPT passes fused=True to AdamW only on CUDA; on a CPU it runs torch's
            # default per-parameter loop. Same groups, same hyperparameters otherwise.
            optimizer = torch.optim.AdamW(optimizer.param_groups, lr=cfg.learning_rate,
                                          betas=(cfg.beta1, cfg.beta2))
        model = torch.compile(raw_model) if cfg.compile else raw_model
        model.train()
        accum = cfg.grad_accum
        warmup, steps = args["warmup"], args["steps"]
        times, loss_value = [], math.nan
        for step in range(warmup + steps):
            t0 = time.perf_counter()
            set_lr(optimizer, lr_at(step, cfg))
            loss_sum = torch.zeros((), device=rt.device)
            for _ in range(accum):
                x, y = batches.train()
                with rt.autocast():
                    _, loss = model(x, y)
                    loss = loss / accum
                loss.backward()
                loss_sum += loss.detach()
            # train.py checks these every step; keeping the checks keeps the same synchronisation points.
            if not torch.isfinite(loss_sum):
                raise RuntimeError(f"loss became {loss_sum.item()} at step {step}")
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync(rt.device)
            elapsed = time.perf_counter() - t0
            if step >= warmup:
                times.append(elapsed)
            loss_value = loss_sum.item()
    finally:
        rt_mod.teardown(rt)

    tokens_per_step = cfg.batch_size * cfg.block_size * cfg.grad_accum
    median = statistics.median(times)
    quantiles = statistics.quantiles(times, n=10) if len(times) >= 2 else [median] * 9
    flops = flops_per_token(raw_model)
    tokens_per_s = tokens_per_step / median
    return {
        "config": args["config"], "overrides": args.get("overrides", []), "synthetic": bool(args.get("synthetic")),
        "dataset": cfg.dataset, "tokenizer": cfg.tokenizer, "arch": cfg.arch,
        "model": f"{cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} block {cfg.block_size}", "vocab_size": vocab_size,
        "device": str(rt.device), "compute_dtype": str(rt.autocast_dtype or torch.float32).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "compile": cfg.compile, "tokens_per_step": tokens_per_step, "warmup_steps": warmup, "timed_steps": len(times),
        "ms_per_step": median * 1e3, "ms_per_step_p10": quantiles[0] * 1e3, "ms_per_step_p90": quantiles[-1] * 1e3,
        "ms_per_step_mean": statistics.fmean(times) * 1e3, "tokens_per_s": tokens_per_s,
        **flops, "achieved_gflops": flops["flops_per_token"] * tokens_per_s / 1e9, "last_loss": loss_value,
    }


def worker_sampling(args: dict) -> dict:
    """Greedy generation with and without the KV cache, interleaved, same prompt."""
    import torch

    from data.tokenizer import tokenizer_from_meta
    from model import GPT, GPTConfig
    from trainer.checkpoint import load_checkpoint
    from trainer.runtime import pick_device

    device = pick_device("auto")
    ckpt = load_checkpoint(args["ckpt"], map_location=device)
    model = GPT(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.to(device).eval()
    tokenizer = tokenizer_from_meta(ckpt["tokenizer"])
    prompt = torch.tensor([tokenizer.encode(args["prompt"])], device=device)
    n = args["tokens"]

    def generate(use_cache: bool, count: int) -> tuple[torch.Tensor, float]:
        _sync(device)
        t0 = time.perf_counter()
        out = model.generate(prompt, count, temperature=0.0, use_cache=use_cache)
        _sync(device)
        return out, time.perf_counter() - t0

    generate(True, 16)  # first calls pay for allocations and lazy initialisation
    generate(False, 16)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, torch.Tensor] = {}
    for run in range(args["runs"]):
        # Alternate which goes first, so neither always follows the other.
        for use_cache in ((True, False) if run % 2 == 0 else (False, True)):
            outputs[use_cache], dt = generate(use_cache, n)
            seconds[use_cache].append(dt)
    cached, uncached = outputs[True][0, prompt.shape[1]:], outputs[False][0, prompt.shape[1]:]
    identical = torch.equal(cached, uncached)
    mismatch = None if identical else int((cached != uncached).nonzero()[0, 0])
    cache_tps = n / statistics.median(seconds[True])
    no_cache_tps = n / statistics.median(seconds[False])
    cfg = model.config
    return {
        "checkpoint": args["ckpt"], "step": ckpt.get("step"), "model": f"{cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} "
        f"block {cfg.block_size}", "vocab_size": cfg.vocab_size, "device": str(device),
        "threads": torch.get_num_threads(), "new_tokens": n, "runs": args["runs"],
        "cache_tokens_per_s": cache_tps, "no_cache_tokens_per_s": no_cache_tps, "speedup": cache_tps / no_cache_tps,
        "identical": identical, "first_mismatch": mismatch, "text_head": tokenizer.decode(cached[:60].tolist()),
    }


WORKERS = {"peak": worker_peak, "throughput": worker_throughput, "sampling": worker_sampling}


def worker_main(name: str, raw_args: str) -> int:
    sys.path.insert(0, str(REPO))
    os.chdir(REPO)
    result = WORKERS[name](json.loads(raw_args))
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# --- child processes and their memory -------------------------------------------------------------


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_with_rss(proc: subprocess.Popen) -> tuple[int, float | None]:
    """Exit code and the child's peak resident set in MiB (wait4 reports it for that child alone)."""
    if not hasattr(os, "wait4"):
        return proc.wait(), None
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    kib = usage.ru_maxrss / 1024 if sys.platform == "darwin" else usage.ru_maxrss  # macOS reports bytes
    return proc.returncode, kib / 1024


def run_worker(name: str, args: dict) -> dict:
    cmd = [sys.executable, str(BENCH / "run.py"), "--worker", name, "--worker_args", json.dumps(args)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env=child_env())
    result = None
    try:
        for line in proc.stdout:
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX):])
            elif line.strip():
                log(f"    [{name}] {line.rstrip()}")
    except KeyboardInterrupt:
        proc.wait()
        raise
    code, rss = wait_with_rss(proc)
    if code != 0 or result is None:
        return {"error": f"worker {name} exited with status {code} (its traceback is above)"}
    result.update(max_rss_mb=rss, process_wall_s=time.perf_counter() - t0)
    return result


EVAL_RE = re.compile(r"step (\d+): train loss (\S+), val loss (\S+)")
DONE_RE = re.compile(r"done: (\d+) steps in ([0-9.]+) s")
BAR_RE = re.compile(r"^\s*train:\s+\d+%")


def run_training(config: str, out_dir: str, settings: Settings, target: float) -> dict:
    """train.py as users run it; each stdout line is timestamped as it arrives."""
    from trainer.config import load_config

    cfg = load_config(REPO / config, list(settings.train_overrides))
    stem = Path(config).stem
    cmd = [sys.executable, "-u", "train.py", config, f"--out_dir={out_dir}",
           f"--log_dir={(SCRATCH / 'runs').relative_to(REPO)}", f"--run_name=bench-{stem}"]
    if settings.eval_interval:
        cmd.append(f"--eval_interval={settings.eval_interval}")
    if settings.max_iters:
        cmd.append(f"--max_iters={settings.max_iters}")
    cmd += settings.train_overrides
    eval_interval = settings.eval_interval or cfg.eval_interval
    max_iters = settings.max_iters or cfg.max_iters
    log(f"    $ {shlex.join(cmd[2:])}")

    evals, startup_s, train_loop_s, hit = [], None, None, None
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        for line in proc.stdout:  # text mode splits tqdm's carriage-return updates into lines too
            now = time.perf_counter() - t0
            if startup_s is None and line.startswith("model:"):
                startup_s = now
            if match := EVAL_RE.search(line):
                step, train_loss, val_loss = int(match[1]), float(match[2].rstrip(",")), float(match[3])
                evals.append({"step": step, "train_loss": train_loss, "val_loss": val_loss, "wall_s": now})
                if hit is None and val_loss <= target:
                    hit = evals[-1]
            if match := DONE_RE.search(line):
                train_loop_s = float(match[2])
            if line.strip() and not BAR_RE.match(line):
                log(f"    [{stem} {now:6.1f}s] {line.rstrip()}")
    except KeyboardInterrupt:
        proc.wait()  # train.py got the same Ctrl-C and is saving its checkpoint
        raise
    code, rss = wait_with_rss(proc)
    total = time.perf_counter() - t0
    last = evals[-1] if evals else {}
    result = {
        "config": config, "command": shlex.join(["python", *cmd[1:]]), "eval_interval": eval_interval,
        "eval_iters": cfg.eval_iters, "evaluations": len(evals), "max_iters": max_iters, "target_val_loss": target,
        "reached": hit is not None, "step_at_target": hit and hit["step"], "wall_s_at_target": hit and hit["wall_s"],
        "val_at_target": hit and hit["val_loss"], "final_step": last.get("step"),
        "final_val_loss": last.get("val_loss"), "final_train_loss": last.get("train_loss"),
        "best_val_loss": min((e["val_loss"] for e in evals), default=None), "startup_s": startup_s,
        "train_loop_s": train_loop_s, "total_wall_s": total, "max_rss_mb": rss, "return_code": code,
        "checkpoint": str(Path(out_dir) / "ckpt.pt"), "evals": evals,
    }
    if code != 0:
        result["error"] = f"train.py exited with status {code}"
    return result


# --- aggregation over repeats ---------------------------------------------------------------------

BULKY = ("evals", "text_head")


def aggregate(runs: list[dict]) -> dict:
    """Medians of numbers over repeats; other values kept when all agree, else listed."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[-1]
    out = {}
    for key in good[0]:
        values = [r.get(key) for r in good]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if key in BULKY or len(good) == 1:
            out[key] = values[-1]
        elif numeric and all(v == values[0] for v in values):
            out[key] = values[0]  # settings such as tokens/step: keep their type
        elif numeric:
            out[key] = statistics.median(values)
        else:
            out[key] = values[0] if all(v == values[0] for v in values) else values
    if len(runs) > 1:
        out["repeats"] = len(runs)
        out["per_run"] = [{k: v for k, v in r.items() if k not in BULKY} for r in runs]
    return out


def ratio(ours, ref) -> float | None:
    if ours is None or ref in (None, 0) or isinstance(ours, (list, bool)):
        return None
    return ours / ref


# --- the run ------------------------------------------------------------------------------------


def git_commit() -> str | None:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        # --no-optional-locks: reading status must never take the index lock from someone committing.
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
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


def plan(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(benchmark, key) units of one repeat, in the order they run."""
    selected = args.only or list(BENCHMARKS)
    units = []
    if "peak" in selected or "throughput" in selected:
        units.append(("peak", "fp32_matmul"))
    if "throughput" in selected:
        for config in [*THROUGHPUT_CONFIGS, *args.config]:
            units.append(("throughput", config))
            if config == "configs/shakespeare_char.toml":
                units.append(("throughput", BASELINE_KEY))  # interleaved with the run it is compared to
    if "time_to_target" in selected:
        for config in [*TARGET_CONFIGS, *args.target_config]:
            units.append(("time_to_target", config))
    if "sampling" in selected:
        units.append(("sampling", "checkpoint"))
    return list(dict.fromkeys(units))


def out_dir_for(config: str, quick: bool) -> str:
    return f"out/bench_{'quick_' if quick else ''}{Path(config).stem}"


def run_unit(bench: str, key: str, args: argparse.Namespace, settings: Settings) -> dict:
    if bench == "peak":
        return run_worker("peak", {"n": settings.peak_n, "warmup": settings.peak_warmup, "reps": settings.peak_reps})
    if bench == "throughput":
        baseline, _, config = key.rpartition(":")
        return run_worker("throughput", {"config": config, "warmup": settings.warmup, "steps": settings.steps,
                                         "baseline": baseline or None,
                                         "overrides": args.overrides,
                                         "synthetic": args.synthetic})
    if bench == "time_to_target":
        if not (REPO / key).is_file():
            return {"config": key, "skipped": f"{key} does not exist yet"}
        return run_training(key, out_dir_for(key, args.quick), settings, args.target)
    ckpt = args.ckpt or str(Path(out_dir_for(SAMPLING_CONFIG, args.quick)) / "ckpt.pt")
    trained = None
    if not (REPO / ckpt).is_file():
        if args.ckpt:
            return {"error": f"checkpoint {args.ckpt} not found"}
        log(f"    no checkpoint at {ckpt}: training one with {SAMPLING_CONFIG}")
        trained = run_training(SAMPLING_CONFIG, out_dir_for(SAMPLING_CONFIG, args.quick), settings, args.target)
        if "error" in trained:
            return {"error": "training the checkpoint to sample from failed", "training": trained}
    result = run_worker("sampling", {"ckpt": ckpt, "tokens": settings.sample_tokens, "runs": settings.sample_runs,
                                     "prompt": "\n"})
    if trained is not None:
        result["trained_checkpoint"] = {k: v for k, v in trained.items() if k != "evals"}
    return result


def summarise(raw: dict[tuple[str, str], list[dict]]) -> dict:
    results: dict = {}
    for (bench, key), runs in raw.items():
        agg = aggregate(runs)
        if bench in ("peak", "sampling"):
            results[bench] = agg
        elif key == BASELINE_KEY:
            results.setdefault(bench, {})["shakespeare_char (nanoGPT's CPU AdamW)"] = agg
        else:
            results.setdefault(bench, {})[Path(key).stem] = agg
    peak = results.get("peak", {}).get("best_gflops")
    for row in results.get("throughput", {}).values():
        if "error" in row:
            continue
        # A bf16-autocast run is measured against the bf16 peak, where the harness has one (CUDA).
        bf16 = row.get("compute_dtype") == "bfloat16" and results.get("peak", {}).get("bf16_best_gflops")
        row["peak_dtype"] = "bfloat16" if bf16 else "float32"
        row["peak_gflops"] = results["peak"]["bf16_best_gflops"] if bf16 else peak
        row["mfu"] = ratio(row["achieved_gflops"], row["peak_gflops"])
        recipe = row["dataset"] == "shakespeare" and row["tokenizer"] == "char"
        if recipe and not row.get("synthetic") and not row.get("overrides"):  # only the recipe as nanoGPT ran it
            row["vs_nanogpt"] = {"tokens_per_s": ratio(row["tokens_per_s"], REFERENCE["tokens_per_s"]),
                                 "ms_per_step": ratio(row["ms_per_step"], REFERENCE["ms_per_step"]),
                                 "mfu": ratio(row["mfu"], REFERENCE["mfu"])}
    if peak is not None:
        results["peak"]["vs_nanogpt"] = {"peak_gflops": ratio(peak, REFERENCE["peak_gflops"])}
    for row in results.get("time_to_target", {}).values():
        if "skipped" in row or "error" in row:
            continue
        row["vs_nanogpt"] = {"wall_s_at_target": ratio(row["wall_s_at_target"], REFERENCE["wall_s"]),
                             "step_at_target": ratio(row["step_at_target"], REFERENCE["val_loss_step"]),
                             "total_wall_s": ratio(row["total_wall_s"], REFERENCE["wall_s"])}
    sampling = results.get("sampling")
    if sampling and "error" not in sampling:
        ref = REFERENCE["sample_tokens_per_s_no_cache"]
        sampling["vs_nanogpt"] = {"no_cache_tokens_per_s": ratio(sampling["no_cache_tokens_per_s"], ref),
                                  "cache_tokens_per_s": ratio(sampling["cache_tokens_per_s"], ref)}
    return results


def comparisons(results: dict) -> dict:
    out = {}
    ttt = results.get("time_to_target", {})
    base, fast = ttt.get("shakespeare_char", {}), ttt.get("shakespeare_char_fast", {})
    if base.get("reached") is True and fast.get("reached") is True:
        out["time_to_target_fast_vs_base"] = {
            "speedup": base["wall_s_at_target"] / fast["wall_s_at_target"],
            "steps_ratio": fast["step_at_target"] / base["step_at_target"]}
    tp = results.get("throughput", {})
    ours, theirs = tp.get("shakespeare_char", {}), tp.get("shakespeare_char (nanoGPT's CPU AdamW)", {})
    if "tokens_per_s" in ours and "tokens_per_s" in theirs:
        out["throughput_vs_nanogpt_adamw"] = {"speedup": ours["tokens_per_s"] / theirs["tokens_per_s"]}
    return out


# --- reports --------------------------------------------------------------------------------------


def fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return "/".join(fmt(v, digits) for v in value)
    return str(value)


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]


def times(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def section_tables(results: dict) -> list[str]:
    lines: list[str] = []
    peak = results.get("peak")
    if peak:
        lines += ["### Peak matmul (MFU denominator)", ""]
        if "error" in peak:
            lines += [f"error: {peak['error']}", ""]
        else:
            rows = [[peak["device"], "float32", f"{peak['n']}x{peak['n']}", fmt(peak["reps"]),
                     fmt(peak["best_gflops"]), fmt(peak["median_gflops"]), fmt(peak["max_rss_mb"], 0),
                     times(peak.get("vs_nanogpt", {}).get("peak_gflops"))]]
            if peak.get("bf16_best_gflops"):
                rows.append([peak["device"], "bfloat16", f"{peak['n']}x{peak['n']}", fmt(peak["reps"]),
                             fmt(peak["bf16_best_gflops"]), fmt(peak["bf16_median_gflops"]), "", "-"])
            lines += table(["device", "dtype", "size", "reps", "best GFLOP/s", "median GFLOP/s", "peak RSS MiB",
                            "vs nanoGPT"], rows)
            lines.append("")
    rows = []
    for name, r in results.get("throughput", {}).items():
        if "error" in r:
            rows.append([name, r["error"], *[""] * 9])
            continue
        vs = r.get("vs_nanogpt", {})
        label = name + "".join(f" {o}" for o in r.get("overrides", [])) + (" (random tokens)" if r.get("synthetic")
                                                                          else "")
        mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%" + (
            " of bf16" if r.get("peak_dtype") == "bfloat16" else "")
        rows.append([label, r["model"], fmt(r["tokens_per_step"]), f"{fmt(r['ms_per_step'], 2)} "
                     f"({fmt(r['ms_per_step_p10'], 1)}-{fmt(r['ms_per_step_p90'], 1)})", fmt(r["tokens_per_s"], 0),
                     fmt(r["achieved_gflops"], 2), mfu,
                     fmt(r["max_rss_mb"], 0), times(vs.get("tokens_per_s")), times(vs.get("mfu")),
                     f"{r['warmup_steps']}+{fmt(r['timed_steps'])}"])
    if rows:
        lines += ["### Training throughput (in-process, median step after warm-up, no evaluation)", ""]
        lines += table(["config", "model", "tokens/step", "ms/step (p10-p90)", "tokens/s", "GFLOP/s", "MFU",
                        "peak RSS MiB", "tokens/s vs nanoGPT", "MFU vs nanoGPT", "warm-up+timed"], rows)
        lines.append("")
    rows = []
    for name, r in results.get("time_to_target", {}).items():
        if "skipped" in r or ("error" in r and "eval_interval" not in r):
            rows.append([name, r.get("skipped") or r["error"], *[""] * 9])
            continue
        vs = r.get("vs_nanogpt", {})
        rows.append([name, fmt(r["eval_interval"]), fmt(r["reached"]), fmt(r["step_at_target"]),
                     fmt(r["wall_s_at_target"]), times(vs.get("wall_s_at_target")),
                     f"{fmt(r['final_step'])}/{fmt(r['max_iters'])}", fmt(r["final_val_loss"], 4),
                     fmt(r["total_wall_s"]), fmt(r["startup_s"]), fmt(r["max_rss_mb"], 0)])
    if rows:
        target = next((r["target_val_loss"] for r in results["time_to_target"].values() if "target_val_loss" in r),
                      TARGET_VAL_LOSS)
        lines += [f"### Time to val loss <= {target} (`python train.py CONFIG`, wall time from process start)", ""]
        lines += table(["config", "eval every", "reached", "step", "wall s at target", "vs nanoGPT 171 s",
                        "steps run", "final val", "total wall s", "startup s", "peak RSS MiB"], rows)
        lines.append("")
    s = results.get("sampling")
    if s:
        lines += ["### Sampling (greedy, batch 1, median of runs)", ""]
        if "error" in s:
            lines += [f"error: {s['error']}", ""]
        else:
            vs = s.get("vs_nanogpt", {})
            lines += table(["checkpoint", "step", "new tokens", "KV cache tok/s", "no cache tok/s", "speedup",
                            "identical", "peak RSS MiB", "no cache vs nanoGPT", "cache vs nanoGPT"],
                           [[s["checkpoint"], fmt(s["step"]), fmt(s["new_tokens"]), fmt(s["cache_tokens_per_s"], 0),
                             fmt(s["no_cache_tokens_per_s"], 0), times(s["speedup"]), fmt(s["identical"]),
                             fmt(s["max_rss_mb"], 0), times(vs.get("no_cache_tokens_per_s")),
                             times(vs.get("cache_tokens_per_s"))]])
            lines.append("")
    return lines


def machine_lines(m: dict) -> list[str]:
    return [f"- CPU: {m['cpu']}; {m['cores']} logical cores ({m['cores_usable']} usable)"
            + (f"; GPU: {m['cuda']}" if m.get("cuda") else ""),
            f"- torch {m['torch']}, torch.get_num_threads() = {m['torch_threads']}; Python {m['python']}; "
            f"{m['platform']}",
            f"- date {m['date']}; commit {m['commit'] or '-'}; load average at start {fmt(m['load_avg_start'], 2)}"]


def render_markdown(doc: dict | None, quick: bool = False) -> str:
    lines = ["# Benchmark results" + (" (quick smoke test: not real numbers)" if quick else ""), "",
             "Written by `bench/run.py` from `bench/results.json`; edits here are overwritten. Reproduce on an idle",
             "machine (nothing else running: on 2 shared cores one busy process slows a run 3-30x) with:", "",
             "    python bench/run.py --repeats 3", "",
             "or one section with `--only peak|throughput|time_to_target|sampling`. What each number means: "
             "bench/README.md.", ""]
    if not doc or not doc.get("results"):
        lines += ["No full run recorded yet.", ""]
        return "\n".join(lines)
    commands = list(dict.fromkeys(m["command"] for m in doc.get("measured", {}).values()))
    lines += ["The numbers below came from " + ", then ".join(f"`{c}`" for c in commands) + ".", ""]
    lines += ["## Machine", "", *machine_lines(doc["machine"]), ""]
    ref = doc.get("reference", REFERENCE)
    lines += ["## nanoGPT reference (same CPU)", "",
              f"{ref['what']}: {fmt(ref['ms_per_step'], 0)} ms/step, {fmt(ref['tokens_per_s'], 0)} tokens/s, "
              f"{fmt(ref['max_iters'])} steps in {fmt(ref['wall_s'], 0)} s, val {ref['val_loss']} at step "
              f"{fmt(ref['val_loss_step'])}, MFU {fmt(100 * ref['mfu'], 0)}% of {fmt(ref['peak_gflops'], 0)} GFLOP/s; "
              f"sampling without a cache {fmt(ref['sample_tokens_per_s_no_cache'], 0)} tokens/s. "
              "Ratios below are ours / nanoGPT's.", ""]
    lines += ["## Results", ""]
    for bench, section in doc["results"].items():
        measured = doc.get("measured", {}).get(bench)
        lines += section_tables({bench: section})
        if measured and measured.get("date") != doc["machine"]["date"]:
            lines[-1:] = ["", f"(measured {measured['date']} with `{measured['command']}`)", ""]
    side = doc.get("comparisons", {}).get("throughput_vs_nanogpt_adamw")
    if side:
        lines += [f"Side by side, interleaved: the recipe runs {side['speedup']:.2f}x the tokens/s of the same run "
                  f"with nanoGPT's CPU optimizer setting (unfused AdamW).", ""]
    comp = doc.get("comparisons", {}).get("time_to_target_fast_vs_base")
    if comp:
        lines += [f"shakespeare_char_fast reaches the target {comp['speedup']:.2f}x sooner than shakespeare_char "
                  f"in {comp['steps_ratio']:.2f}x the steps.", ""]
    return "\n".join(lines)


def save(doc: dict, quick: bool) -> Path:
    """A quick run stands alone; a full run replaces only the sections it measured."""
    if quick:
        SCRATCH.mkdir(parents=True, exist_ok=True)
        QUICK_JSON.write_text(json.dumps(doc, indent=1) + "\n")
        QUICK_MD.write_text(render_markdown(doc, quick=True))
        return QUICK_MD
    stored = {}
    if RESULTS_JSON.is_file():
        try:
            stored = json.loads(RESULTS_JSON.read_text())
        except ValueError:
            stored = {}
    if stored.get("schema") != SCHEMA:
        stored = {}
    merged = {**stored, **{k: v for k, v in doc.items() if k not in ("results", "measured")}}
    merged["results"] = {**stored.get("results", {}), **doc["results"]}
    merged["measured"] = {**stored.get("measured", {}), **doc["measured"]}
    merged["comparisons"] = comparisons(merged["results"])
    RESULTS_JSON.write_text(json.dumps(merged, indent=1) + "\n")
    RESULTS_MD.write_text(render_markdown(merged))
    return RESULTS_MD


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny step counts: a smoke test of the harness, not numbers")
    p.add_argument("--only", nargs="+", choices=BENCHMARKS, metavar="NAME",
                   help=f"run only these benchmarks ({', '.join(BENCHMARKS)})")
    p.add_argument("--repeats", type=int, default=1,
                   help="run every measurement N times, interleaved A,B,A,B (default 1)")
    p.add_argument("--json", metavar="PATH", help="also write this run's JSON here")
    p.add_argument("--config", action="append", default=[], metavar="TOML",
                   help="another config for the throughput benchmark (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a config key in every throughput run (repeatable), e.g. --set compile=true")
    p.add_argument("--synthetic", action="store_true",
                   help="throughput on random tokens (vocabulary 50304 for gpt2 configs, 256 for char): "
                        "no corpus needed")
    p.add_argument("--target_config", action="append", default=[], metavar="TOML",
                   help="another config for the time-to-target benchmark (repeatable)")
    p.add_argument("--target", type=float, default=TARGET_VAL_LOSS, help=f"target val loss (default {TARGET_VAL_LOSS})")
    p.add_argument("--eval_interval", type=int, default=None,
                   help="evaluation interval for time to target, 0 = the config's own (default 100; 30 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per throughput run (default 200; 30 quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps before those (default 20; 5 quick)")
    p.add_argument("--tokens", type=int, default=None, help="new tokens per sampling run (default 500; 100 quick)")
    p.add_argument("--ckpt", metavar="PATH",
                   help="checkpoint to sample from (default: the one time_to_target trains for shakespeare_char)")
    p.add_argument("--render", action="store_true", help="only rewrite bench/RESULTS.md from bench/results.json")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--worker_args", default="{}", help=argparse.SUPPRESS)
    return p


def relative_to_repo(path: str) -> str:
    """Paths given on the command line, as the child processes (run in the repository) will see them."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPO))
    except ValueError:
        return str(resolved)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.worker_args)
    if args.render:
        doc = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.is_file() else None
        RESULTS_MD.write_text(render_markdown(doc))
        log(f"wrote {RESULTS_MD}")
        return 0
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    base = QUICK if args.quick else FULL
    settings = Settings(**{**asdict(base), **{k: v for k, v in (
        ("steps", args.steps), ("warmup", args.warmup), ("eval_interval", args.eval_interval),
        ("sample_tokens", args.tokens)) if v is not None}})
    args.config = [relative_to_repo(c) for c in args.config]
    args.target_config = [relative_to_repo(c) for c in args.target_config]
    args.ckpt = args.ckpt and relative_to_repo(args.ckpt)

    sys.path.insert(0, str(REPO))
    args.overrides = [f"--{o.removeprefix('--')}" for o in args.overrides]  # as train.py spells them
    if args.overrides:  # refuse a bad --set here, in one line, rather than in every child
        from errors import UsageError
        from trainer.config import load_config

        for config in [*THROUGHPUT_CONFIGS, *args.config]:
            try:
                load_config(REPO / config, args.overrides)
            except UsageError as exc:
                raise SystemExit(f"error: --set with {config}: {exc}") from None
    machine = machine_info()
    if machine["load_avg_start"] and machine["load_avg_start"][0] >= 0.5:
        log(f"warning: load average {machine['load_avg_start'][0]} at start: the machine is not idle, "
            f"so these numbers will be slow and noisy")
    units = plan(args)
    command = shlex.join(["python", "bench/run.py", *argv])
    log(f"{command}: {len(units)} measurements x {args.repeats} repeat(s)")

    raw: dict[tuple[str, str], list[dict]] = {unit: [] for unit in units}
    started = time.perf_counter()
    for repeat in range(args.repeats):
        # Interleaved: every unit once per repeat, in reverse order every other repeat, so a unit
        # that runs right after a heavy one (the matmul peak heats the chip) is not always the same.
        order = units if repeat % 2 == 0 else units[::-1]
        for bench, key in order:
            log(f"[{repeat + 1}/{args.repeats}] {bench} {key}")
            raw[(bench, key)].append(run_unit(bench, key, args, settings))

    results = summarise(raw)
    date = machine["date"]
    machine["load_avg_end"] = [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None
    doc = {
        "schema": SCHEMA, "command": command, "quick": args.quick, "repeats": args.repeats,
        "settings": {**asdict(settings), "target_val_loss": args.target},
        "total_wall_s": time.perf_counter() - started, "machine": machine, "reference": REFERENCE,
        "results": results, "comparisons": comparisons(results),
        "measured": {bench: {"date": date, "command": command} for bench in results},
    }
    written = save(doc, args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))

    log("")
    log("\n".join(machine_lines(machine)))
    log("")
    log("\n".join(section_tables(results)))
    if doc["comparisons"]:
        log(json.dumps(doc["comparisons"]))
    log(f"wrote {written.relative_to(REPO)}" + (f" and {args.json}" if args.json else ""))
    failed = [f"{b} {k}" for (b, k), runs in raw.items() if any("error" in r for r in runs)]
    if failed:
        log(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
