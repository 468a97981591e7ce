"""Measurements that run inside a child process, one each:

    python -m bench.workers NAME ARGS_JSON RESULT_PATH

writes the measurement's dict as JSON to RESULT_PATH. `bench/harness.py` starts them, so
each one starts cold and reports its own peak memory.
"""

from __future__ import annotations

import json
import pickle
import statistics
import sys
import time
from pathlib import Path


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak(args: dict) -> dict:
    """Best matmul rate on this machine, the denominator of MFU: fp32 everywhere, and bf16
    on CUDA, where training runs under bf16 autocast (TF32 stays off for the fp32 figure)."""
    import torch

    from common.settings import pick_device

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
    result = {
        "device": str(device),
        "n": n,
        "reps": args["reps"],
        "threads": torch.get_num_threads(),
        "best_gflops": best,
        "median_gflops": median,
    }
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
    the whole block without halving for the causal mask, as nanoGPT counts it.
    """
    cfg = model.config
    embeddings = model.wte.weight.numel() + (model.wpe.weight.numel() if model.wpe is not None else 0)
    non_embedding = sum(p.numel() for p in model.parameters()) - embeddings  # tied head: counted once here
    head = cfg.n_embd * cfg.vocab_size
    attention = 12 * cfg.n_layer * cfg.n_embd * cfg.block_size
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "non_embedding_params": non_embedding,
        "flops_per_token": 6 * (non_embedding + head) + attention,
    }


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


def _trainer(config: str, overrides: list[str], synthetic: bool):
    """The Trainer train.py would build for `config` (on random tokens when `synthetic`)."""
    from bench.harness import load_config
    from model.gpt import GPT
    from trainer import runtime
    from trainer.optim import make_optimizer
    from trainer.start import starting_from
    from trainer.trainer import Trainer

    cfg = load_config(config, [*overrides, "--out_dir=bench/out/throughput"])
    rt = runtime.setup(cfg)
    if not synthetic:
        return Trainer.from_start(starting_from(cfg).prepared(), rt)
    import torch

    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config(SYNTHETIC_VOCAB[cfg.tokenizer])).to(rt.device)
    return Trainer(
        cfg,
        rt,
        model,
        make_optimizer(model, cfg, rt.device),
        SyntheticBatches(model.config.vocab_size, cfg.model.block_size, cfg.batch_size, rt.device),
    )


def _timed_steps(trainer, warmup: int, steps: int) -> tuple[list[float], float | None]:
    """Seconds of each of `steps` `Trainer.step()` calls after `warmup` untimed ones, and the last loss."""
    from trainer import runtime

    try:
        times, loss = [], None
        for step in range(warmup + steps):
            t0 = time.perf_counter()
            loss = trainer.step().loss
            _sync(trainer.runtime.device)
            if step >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        runtime.teardown(trainer.runtime)
    return times, loss


def throughput(args: dict) -> dict:
    """Median time of a full optimizer step: `Trainer.step()`, the step train.py runs."""
    import torch

    trainer = _trainer(args["config"], args.get("overrides", []), bool(args.get("synthetic")))
    times, loss = _timed_steps(trainer, args["warmup"], args["steps"])
    cfg, model = trainer.cfg, trainer.model
    median = statistics.median(times)
    deciles = statistics.quantiles(times, n=10) if len(times) >= 2 else [median] * 9
    flops = flops_per_token(model)
    tokens_per_s = trainer.tokens_per_step / median
    return {
        "config": args["config"],
        "overrides": args.get("overrides", []),
        "synthetic": bool(args.get("synthetic")),
        "arch": model.config.arch,
        "model": f"{model.config.n_layer}x{model.config.n_head}x{model.config.n_embd} block {cfg.model.block_size}",
        "vocab_size": model.config.vocab_size,
        "device": str(trainer.runtime.device),
        "compute_dtype": str(trainer.runtime.autocast_dtype or torch.float32).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "compile": cfg.compile,
        "tokens_per_step": trainer.tokens_per_step,
        "warmup_steps": args["warmup"],
        "timed_steps": len(times),
        "ms_per_step": median * 1e3,
        "ms_per_step_p10": deciles[0] * 1e3,
        "ms_per_step_p90": deciles[-1] * 1e3,
        "tokens_per_s": tokens_per_s,
        **flops,
        "achieved_gflops": flops["flops_per_token"] * tokens_per_s / 1e9,
        "last_loss": loss,
    }


def finetune(args: dict) -> dict:
    """Fine-tuning a model trained elsewhere: `load_model` reads it (cropped to the config's block), and
    `Trainer.step()`, the step train.py runs, trains it with the optimizer train.py builds, on random tokens of
    its vocabulary. Median time of a step after `warmup` untimed ones."""
    import torch

    from bench.harness import load_config
    from formats import load_model
    from trainer import runtime
    from trainer.optim import make_optimizer
    from trainer.trainer import Trainer

    cfg = load_config(None, args["overrides"])
    rt = runtime.setup(cfg)
    torch.manual_seed(cfg.seed)
    model = load_model(args["ckpt"], rt.device, block_size=cfg.model.block_size).model.train()
    vocab = model.config.vocab_used or model.config.vocab_size
    trainer = Trainer(
        cfg,
        rt,
        model,
        make_optimizer(model, cfg, rt.device),
        SyntheticBatches(vocab, cfg.model.block_size, cfg.batch_size, rt.device),
    )
    times, loss = _timed_steps(trainer, args["warmup"], args["steps"])
    return {
        "ms_per_step": statistics.median(times) * 1e3,
        "step_ms": [t * 1e3 for t in times],
        "threads": torch.get_num_threads(),
        "tokens_per_step": trainer.tokens_per_step,
        "last_loss": loss,
        "params": sum(p.numel() for p in model.parameters()),
        "model_config": model.config.to_dict(),
    }


# The draw of random sequences a demo's floors are judged on: not draw 0, which the watch shows while a run trains and
# a recipe is tuned by, so that no floor is judged on the very sample it was tuned on.
FLOOR_DRAW = 1


def demo_floors(args: dict) -> dict:
    """A demo's floors, read from the checkpoint its run wrote, with the watch's own measures (what the run's
    report prints, zero-ablation) on draw `args["draw"]` (FLOOR_DRAW) of the random sequences: for "default",
    the best pronoun head, where `she` looks in the demo sentence and the continuation accuracy with and without
    that head; for "induction", the best induction score and the in-context gain, each with its spread, the gain
    left with the top two induction heads removed, and the best previous-token head of an earlier layer with the
    gain left without it."""
    import torch

    from formats import load_model
    from watch.inspect import checkpoint_reading, checkpoint_sets
    from watch.measure.heads import Ablation, last_pronoun_pos, parse_head
    from watch.measure.probesets import REPEATED
    from watch.measure.proofs import best_pronoun_proof, proofs, top_heads
    from watch.measure.reading import read_pass

    loaded = load_model(args["ckpt"], torch.device("cpu"))
    model, tokenizer, checkpoint = loaded.model, loaded.tokenizer, loaded.checkpoint
    sets = checkpoint_sets(model, tokenizer, checkpoint, None, draw=args.get("draw", FLOOR_DRAW))
    reading = checkpoint_reading(model, sets, checkpoint)
    numbers = reading.results.numbers
    if args["demo"] == "default":
        best = reading.pronouns.best
        removed = best_pronoun_proof(reading, proofs(model, sets, reading))
        ids = tokenizer.encode(args["sentence"])
        tokens = [tokenizer.decode([i]) for i in ids]
        with torch.no_grad():
            _, patterns = model.forward_with_attention(torch.tensor([ids]))
        layer, head = parse_head(best.name)
        row = patterns[layer][0, head, last_pronoun_pos(tokens)]
        on = {word: float(row[tokens.index(f" {word}")]) for word in args["words"]}
        return {
            "best_head": best.name,
            "referent": best.referent,
            "top1": best.top1,
            "attention": on,
            "continuation": numbers["continuation_accuracy"],
            "continuation_ablated": removed.reading.results.numbers["continuation_accuracy"],
        }
    induction = reading.type_scores["induction"]
    first, second = (parse_head(name) for name in top_heads(induction, 2))
    gain = numbers["in_context_gain"]

    def gain_without(*heads: tuple[int, int]) -> float:
        ablated = read_pass(model, sets, ablate=Ablation(list(heads)), kinds=(REPEATED,))
        return ablated.results.numbers["in_context_gain"]

    best = top_heads(induction, 1)[0]
    found = {
        "best_induction_head": best,
        "induction": float(induction.max()),
        "induction_spread": reading.results.head("induction_spread", *parse_head(best)),
        "gain": gain,
        "gain_spread": numbers["in_context_gain_spread"],
        "gain_without_top_two": gain_without(first, second),
        "draw": args.get("draw", FLOOR_DRAW),
    }
    earlier = reading.results.heads["previous_token"][: first[0]]  # the layers before the best induction head
    if not earlier.numel():  # the best induction head is in layer 0: no earlier layer to hold its partner
        return {**found, "previous_token_head": None, "previous_token": None, "gain_without_previous_token_head": None}
    prev_layer, prev_head = divmod(int(torch.argmax(earlier)), earlier.shape[1])
    return {
        **found,
        "previous_token_head": f"L{prev_layer}H{prev_head}",
        "previous_token": float(earlier.max()),
        "gain_without_previous_token_head": gain_without((prev_layer, prev_head)),
    }


def _time_generation(generate, runs: int) -> tuple[list[float], object]:
    generate(16)  # the first call pays for allocations and lazy initialisation
    seconds, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = generate(None)
        seconds.append(time.perf_counter() - t0)
    return seconds, out


def sampling(args: dict) -> dict:
    """Ours: `tokens` new tokens from a one-token prompt, in process, with the KV cache
    (what sample.py runs) and without; median of `runs` each, alternating."""
    import torch

    from formats import load_model

    loaded = load_model(args["ckpt"], torch.device("cpu"))
    model, prompt = loaded.model, torch.tensor([loaded.tokenizer.encode(args["prompt"])])
    n = args["tokens"]

    def generate(use_cache: bool):
        def run(count: int | None):
            generator = torch.Generator().manual_seed(1337)
            return model.generate(
                prompt,
                count or n,
                temperature=args["temperature"],
                top_k=args["top_k"],
                generator=generator,
                use_cache=use_cache,
            )

        return run

    cached, out_cached = _time_generation(generate(True), args["runs"])
    uncached, out_uncached = _time_generation(generate(False), args["runs"])
    return {
        "checkpoint": args["ckpt"],
        "new_tokens": n,
        "runs": args["runs"],
        "threads": torch.get_num_threads(),
        "tokens_per_s": n / statistics.median(cached),
        "no_cache_tokens_per_s": n / statistics.median(uncached),
        "identical": bool(torch.equal(out_cached, out_uncached)),
        "text_head": loaded.tokenizer.decode(out_cached[0, :80].tolist()),
    }


def nanogpt_sampling(args: dict) -> dict:
    """nanoGPT's `GPT.generate` on its recipe checkpoint, as its sample.py calls it, timed the same way."""
    import torch

    from bench.nanogpt import load_model_module

    nano = load_model_module(Path(args["home"]))
    ckpt = torch.load(Path(args["ckpt"]), map_location="cpu")
    model = nano.GPT(nano.GPTConfig(**ckpt["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    model.load_state_dict(state)
    model.eval()
    with open(Path(args["home"]) / "data" / "shakespeare_char" / "meta.pkl", "rb") as fh:
        stoi = pickle.load(fh)["stoi"]  # nanoGPT's own character table, as its sample.py reads it
    prompt = torch.tensor([[stoi[c] for c in args["prompt"]]])
    n = args["tokens"]

    def run(count: int | None):
        torch.manual_seed(1337)
        with torch.no_grad():
            return model.generate(prompt, count or n, temperature=args["temperature"], top_k=args["top_k"])

    seconds, _ = _time_generation(run, args["runs"])
    return {
        "checkpoint": args["ckpt"],
        "new_tokens": n,
        "runs": args["runs"],
        "threads": torch.get_num_threads(),
        "tokens_per_s": n / statistics.median(seconds),
    }


WORKERS = {
    "demo_floors": demo_floors,
    "peak": peak,
    "throughput": throughput,
    "finetune": finetune,
    "sampling": sampling,
    "nanogpt_sampling": nanogpt_sampling,
}


def main(argv: list[str]) -> int:
    name, raw_args, result_path = argv
    result = WORKERS[name](json.loads(raw_args))
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
