"""Sampling: new text one token at a time, with a KV cache. A reader of the model can skip it.

- `KVCache`: what a generation keeps between tokens: each layer's keys and values so far, so a new token
  attends to them without recomputing them, and the plain tensors its modules read.
- `decode`: one step of the model for new positions, through the cache and the blocks' own `forward`.
  At a small model's single token the arithmetic takes microseconds and the cost is in how many operations
  run, so that step sees rows of a 2-D tensor, the three projections are one matmul, the residual additions
  happen inside the matmuls, and the weights are plain tensors gathered once per generation: reading a
  parameter through its module costs about a microsecond each time.
- `generate_stream` / `generate`: the loop, and `sample_next`, the sampling maths (temperature, top-k, top-p).

`tests/test_model.py` proves that `decode` gives the logits `GPT.forward` gives, and that sampling with and
without the cache gives the same text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerCache:
    """One layer's part of a `KVCache`: `slot`, its keys and values [batch, position, 2, head, head_dim], side by
    side so a new position's are written in one copy, preallocated so that copy is in place; and what the
    block reads instead of its modules' parameters: `parts` (the norms as functions, the attention's and the
    MLP's forward), `qkv` (`SelfAttention.fused_projection`), the weights of `out_proj` and `mlp`, transposed."""

    def __init__(self, block: nn.Module, batch: int, max_len: int, like: torch.Tensor) -> None:
        attn, mlp, ln_2 = block.attn, block.mlp, block.ln_2
        self.slot = torch.zeros(batch, max_len, 2, attn.n_head, attn.head_dim, device=like.device, dtype=like.dtype)
        self.batch = batch
        self.length = 0  # positions filled: the KVCache's, kept here too so the layer reads it in one lookup
        self.block = block.forward
        self.parts = (
            block.ln_1.as_function(),
            attn.forward,
            *((None, None) if mlp is None else (ln_2.as_function(), mlp.forward)),
        )
        self.qkv = attn.fused_projection()
        self.out_proj = (attn.out_proj.weight.t(), attn.out_proj.bias)
        self.mlp = None if mlp is None else (mlp.c_fc.weight.t(), mlp.c_fc.bias, mlp.c_proj.weight.t(), mlp.c_proj.bias)

    def append(self, keys_and_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores this layer's keys and values [B, T, 2, H, head_dim] for positions length..length+T-1; returns
        all the keys and all the values it holds, those included, each [B, H, positions, head_dim]."""
        end = self.length + keys_and_values.shape[1]
        self.slot[:, self.length : end] = keys_and_values
        keys, values = self.slot[:, :end].permute(2, 0, 3, 1, 4).unbind(0)  # views
        return keys, values


class KVCache:
    """What sampling keeps between tokens for one generation of `batch` sequences: a `LayerCache` per layer,
    the token and position tables and the final norm. It owns the length, the same in every layer: once every
    layer has appended, `decode` calls `advance`."""

    def __init__(self, model: nn.Module, batch: int) -> None:
        self.tokens = model.wte.weight
        self.positions = None if model.wpe is None else model.wpe.weight
        self.final_norm = model.ln_f.as_function()
        self.layers = [LayerCache(block, batch, model.config.block_size, self.tokens) for block in model.blocks]
        self.no_ablations = [None] * len(self.layers)
        self.length = 0

    def advance(self, n: int) -> None:
        """Every layer has appended `n` positions."""
        self.length += n
        for layer in self.layers:
            layer.length = self.length

    def reset(self) -> None:
        self.advance(-self.length)


def decode(model: nn.Module, idx: torch.Tensor, cache: KVCache, ablations: list | None = None) -> torch.Tensor:
    """Logits [B, vocab] for the position after idx [B, T], whose tokens follow the `cache.length` positions the
    cache holds; adds them to the cache. `ablations` (from `GPT.head_ablations`, one per layer) removes heads
    as `GPT.forward`'s `ablate` does."""
    B, T = idx.shape
    start = cache.length
    if start + T > model.config.block_size:
        raise ValueError(f"the KV cache is full ({model.config.block_size} positions); re-anchor the context first")
    x = F.embedding(idx, cache.tokens)
    if cache.positions is not None:
        x = x + cache.positions[start : start + T]
    x = x.view(B * T, -1)
    for layer, ablation in zip(cache.layers, ablations or cache.no_ablations, strict=True):
        x = layer.block(x, ablation, layer)
    cache.advance(T)
    return torch.mm(cache.final_norm(x.view(B, T, -1)[:, -1]), cache.tokens.t())


# --- the loop ---------------------------------------------------------------------------------------


def generate_stream(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    ablate=None,
) -> Iterator[torch.Tensor]:
    """Yields each new token, [B, 1], as soon as it is sampled, with the heads in `ablate` removed (as
    `GPT.forward` takes it). temperature 0 is greedy. When the context outgrows block_size, the model keeps the
    most recent half block and goes on (re-encoding those tokens once), so with or without the cache it sees
    exactly the same context, and the cache saves work on all but one token in every half block."""
    tokens = _sampled(model, idx, max_new_tokens, temperature, top_k, top_p, generator, use_cache, ablate)
    while True:
        with sampling_mode():  # around each token only: the caller's code between tokens runs as usual
            token = next(tokens, None)
        if token is None:
            return
        yield token


def generate(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
    """idx [B, T] -> [B, T + max_new_tokens]; see `generate_stream` for options."""
    with sampling_mode():
        new = list(_sampled(model, idx, max_new_tokens, **kwargs))
    return torch.cat([idx, *new], dim=1)


def _sampled(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    ablate=None,
) -> Iterator[torch.Tensor]:
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError("generate needs a non-empty prompt shaped [batch, tokens]")
    block = model.config.block_size
    keep = max(1, block // 2)
    context = idx[:, -block:]
    cache = KVCache(model, idx.shape[0]) if use_cache else None
    ablations = model.head_ablations(ablate, idx.device) if ablate else None
    vocab = model.config.vocab_used or model.config.vocab_size  # rows beyond it pad the vocabulary: never sampled
    pending = context  # tokens not yet in the cache
    for _ in range(max_new_tokens):
        if cache is None:
            logits = model(context, ablate=ablate)[0][:, -1]
        else:
            logits = decode(model, pending, cache, ablations)
        next_token = sample_next(logits[:, :vocab], temperature, top_k, top_p, generator)
        yield next_token
        context = torch.cat([context, next_token], dim=1)
        pending = next_token
        if context.shape[1] > block:
            context = context[:, -keep:]
            pending = context
            if cache is not None:
                cache.reset()


@contextmanager
def sampling_mode() -> Iterator[None]:
    """How sampling runs: under inference mode (lighter than no_grad: no version counters, no
    view tracking), and with PyTorch's own CPU kernels rather than oneDNN's, whose set-up costs
    about 10 microseconds a call: more than a sampled token's GELU takes."""
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        with torch.inference_mode():
            yield
    finally:
        torch.backends.mkldnn.enabled = previous


# --- the sampling maths -------------------------------------------------------------------------------

# Below this temperature, sampling is greedy: logit gaps of float32's resolution, divided by it, leave
# every other token a probability of exactly 0 (and a still smaller one would overflow float32).
GREEDY_BELOW = 1e-20


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits [B, V] -> token ids [B, 1]. temperature 0 (or below GREEDY_BELOW) picks the argmax."""
    if temperature < GREEDY_BELOW:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token once the tokens before it already cover top_p; the first always stays.
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        drop_sorted[:, 0] = False  # also when top_p is too small for float32 to tell from 0
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    # An "exponential race": with E_i ~ Exp(1), argmax p_i / E_i is token i with probability
    # p_i, exactly as torch.multinomial draws, for one random draw and an argmax.
    race = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / race).argmax(dim=-1, keepdim=True)
