"""Cached sampling at a revision A against the working tree B, on one or more checkpoints:

    python bench/sampling_ab.py CKPT [CKPT ...] [--rev main] [--repeats 9] [--tokens 500]
    python bench/sampling_ab.py --gpt2-small FOLDER   # writes a random GPT-2-small-shaped checkpoint there

A is `git archive` of `--rev` in a temporary folder. Each side loads the checkpoint in a worker process of
its own (one torch thread); the workers then take turns, A B B A A B ..., each timing a `--tokens`-token
cached generation (temperature 0.8, top_k 200, a generator seeded alike) from a one-token prompt, so both
meet the same machine. Prints each side's median wall and CPU time, their ranges, the ratios B/A of the
medians, of the fastest CPU times and the median of each round's, and whether every run of both sampled
the same tokens. CPU time (`time.process_time`) leaves out the time a worker waits for a core, which on a
shared machine is most of the noise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(tree: str, ckpt: str, tokens: int) -> None:
    """Loads `ckpt` with `tree`'s code, then answers each line on stdin with one timed generation."""
    sys.path.insert(0, tree)
    import torch

    torch.set_num_threads(1)
    from formats import load_model

    model = load_model(ckpt, torch.device("cpu")).model.eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)

    def generate(n: int) -> torch.Tensor:
        return model.generate(prompt, n, temperature=0.8, top_k=200, generator=torch.Generator().manual_seed(1337))

    generate(16)  # the first call pays for allocations and lazy initialisation
    print("ready", flush=True)
    for _ in sys.stdin:
        wall, cpu = time.perf_counter(), time.process_time()
        out = generate(tokens)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        digest = hashlib.sha256(out.numpy().tobytes()).hexdigest()[:16]
        print(json.dumps({"wall": wall, "cpu": cpu, "tokens": digest}), flush=True)


def start_worker(tree: Path, ckpt: str, tokens: int) -> subprocess.Popen:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), ckpt, "--tokens", str(tokens)]
    proc = subprocess.Popen(
        command,
        cwd=tree,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker for {tree} did not start")
    return proc


def timed(proc: subprocess.Popen) -> dict:
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def compare(ckpt: str, tree_a: Path, repeats: int, tokens: int) -> None:
    workers = {"A": start_worker(tree_a, ckpt, tokens), "B": start_worker(ROOT, ckpt, tokens)}
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    try:
        for repeat in range(repeats):  # A B, then B A: neither side always runs first
            for side in ("A", "B") if repeat % 2 == 0 else ("B", "A"):
                runs[side].append(timed(workers[side]))
    finally:
        for proc in workers.values():
            proc.stdin.close()
            proc.wait()
    print(f"{ckpt}: {tokens} cached tokens, {repeats} runs each, alternating A B B A, 1 thread")
    medians = {}
    for side, results in runs.items():
        line = []
        for clock in ("wall", "cpu"):
            seconds = [r[clock] for r in results]
            medians[side, clock] = statistics.median(seconds)
            medians[side, clock + " min"] = min(seconds)
            line.append(
                f"{clock} median {medians[side, clock] * 1e3:8.1f} ms "
                f"(range {min(seconds) * 1e3:.1f}-{max(seconds) * 1e3:.1f})"
            )
        print(f"  {side}: " + "; ".join(line))
    digests = {r["tokens"] for results in runs.values() for r in results}
    ratios = ", ".join(f"{clock} {medians['B', clock] / medians['A', clock]:.3f}" for clock in ("wall", "cpu"))
    paired = statistics.median(b["cpu"] / a["cpu"] for a, b in zip(runs["A"], runs["B"], strict=True))
    print(
        f"  ratio B/A of the medians: {ratios}; of the fastest runs: cpu "
        f"{medians['B', 'cpu min'] / medians['A', 'cpu min']:.3f}; median of each round's: cpu {paired:.3f}; "
        f"identical tokens: {len(digests) == 1}",
        flush=True,
    )


def gpt2_small(folder: Path) -> None:
    """folder/ckpt.pt: GPT-2 small's shape (12 x 12 x 768, block 1024, biases, tanh GELU, its tokenizer), weights
    as a GPT starts."""
    sys.path.insert(0, str(ROOT))
    import torch

    from data.tokenizer import build_tokenizer
    from formats.checkpoint import save_checkpoint
    from model import GPT, GPTConfig

    tokenizer = build_tokenizer("gpt2", "")
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(
            vocab_size=tokenizer.vocab_size,
            n_layer=12,
            n_head=12,
            n_embd=768,
            block_size=1024,
            bias=True,
            qkv_bias=True,
            activation="gelu_tanh",
        )
    )
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(
        folder / "ckpt.pt",
        {
            "model": model.state_dict(),
            "model_config": model.config.to_dict(),
            "tokenizer": tokenizer.to_meta(),
            "step": 0,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", nargs="*")
    parser.add_argument("--rev", default="main", help="the revision A (default main)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--gpt2-small", metavar="FOLDER", help="write a random GPT-2-small-shaped checkpoint")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.ckpt[0], args.tokens)
        return
    if args.gpt2_small:
        gpt2_small(Path(args.gpt2_small))
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], capture_output=True, text=True
        ).stdout.strip()
        print(f"A: {args.rev} ({commit}); B: the working tree")
        for ckpt in args.ckpt:
            compare(str(Path(ckpt).resolve()), Path(folder), args.repeats, args.tokens)


if __name__ == "__main__":
    main()
