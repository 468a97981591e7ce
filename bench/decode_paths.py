"""What the lean one-token decoder buys: cached greedy sampling through
`model/decode.py` against the same cache driven through the modules, and no cache.

    python bench/decode_paths.py [--ckpt PATH] [--tokens 500] [--runs 5]

Runs interleaved in rotating order; prints the median tokens/s of each path and
whether all three produced the same text. An ablation for bench/LOG.md, not part
of `bench/run.py`'s table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import model.gpt as gpt_module  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from model.decode import TokenDecoder  # noqa: E402
from trainer.checkpoint import load_checkpoint  # noqa: E402


class ModuleDecoder:
    """The same cached step, through `GPT._step` and its modules."""

    def __init__(self, model: GPT, cache) -> None:
        self.model, self.cache = model, cache

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model._step(tokens, self.cache)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", default="out/bench_shakespeare_char/ckpt.pt")
    p.add_argument("--tokens", type=int, default=500)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    if not Path(args.ckpt).is_file():
        sys.exit(f"error: no checkpoint at {args.ckpt}; run `python bench/run.py --only sampling` first")
    ckpt = load_checkpoint(args.ckpt)
    model = GPT(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    paths = {"lean decoder": (TokenDecoder, True), "modules": (ModuleDecoder, True), "no cache": (TokenDecoder, False)}

    def run(name: str, count: int) -> tuple[torch.Tensor, float]:
        decoder, use_cache = paths[name]
        gpt_module.TokenDecoder = decoder
        try:
            t0 = time.perf_counter()
            out = model.generate(prompt, count, temperature=0.0, use_cache=use_cache)
            return out, count / (time.perf_counter() - t0)
        finally:
            gpt_module.TokenDecoder = TokenDecoder

    names = list(paths)
    for name in names:
        run(name, 16)  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in names}
    outputs = {}
    for r in range(args.runs):
        for name in names[r % len(names):] + names[:r % len(names)]:
            outputs[name], rate = run(name, args.tokens)
            rates[name].append(rate)
    cfg = model.config
    print(f"{args.ckpt}: {cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} block {cfg.block_size}, "
          f"{args.tokens} greedy tokens, {args.runs} runs, {torch.get_num_threads()} threads")
    for name in names:
        print(f"  {name:13s} {statistics.median(rates[name]):7.0f} tokens/s   runs: "
              + ", ".join(f"{x:.0f}" for x in rates[name]))
    same = all(torch.equal(outputs[names[0]], outputs[n]) for n in names[1:])
    print(f"  same text on all three paths: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
