"""Sampling: new text one token at a time, with a KV cache. A reader of the model can skip it.

Three parts, in the order a token meets them:

- `KVCache`: the keys and values of every position seen so far, so a new token attends to
  them without recomputing them.
- `decode`: one step of the model for new positions, through the cache: `GPT.forward`'s
  layers, calling the modules' own maths (the norms, the MLP's activation, the attention's
  projections and rotation), arranged for a small model's single token, where the arithmetic
  takes microseconds and the cost is in how many operations run. So the layers see rows of a
  2-D tensor, the three projections are one matmul, the residual additions happen inside the
  matmuls, and the weights are plain tensors gathered once per generation.
- `generate_stream` / `generate`: the loop, and `sample_next`, the sampling maths
  (temperature, top-k, top-p).

`tests/test_model.py` proves that `decode` gives the logits `GPT.forward` gives, and that
sampling with and without the cache gives the same text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F


class KVCache:
    """What sampling keeps between tokens: the keys and values of every position seen so far,
    one slot per layer.

    Each layer's slot is [batch, position, 2, head, head_dim], keys and values side by side, so a
    new position's key and value are written in one copy, and preallocated to `max_len`, so
    that copy is in place. The cache owns its length: each layer `append`s at `length`, and
    once every layer has, `decode` calls `advance`. For as long as the generation lasts it also
    keeps the plain tensors `decode` reads (`weights`).
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.slots = [torch.zeros(batch, max_len, 2, n_head, head_dim, device=device, dtype=dtype)
                      for _ in range(n_layer)]
        self.max_len = max_len
        self.batch = batch
        self._length = 0  # positions filled, the same in every layer
        self._weights: tuple | None = None

    @classmethod
    def for_model(cls, model: nn.Module, batch: int) -> KVCache:
        cfg, weight = model.config, model.wte.weight
        return cls(cfg.n_layer, batch, cfg.n_head, cfg.block_size, cfg.head_dim, weight.device, weight.dtype)

    @property
    def length(self) -> int:
        return self._length

    def append(self, layer: int, keys_and_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores `layer`'s keys and values [B, T, 2, H, head_dim] for positions length..length+T-1;
        returns all the keys and all the values it holds for that layer, those included, each
        [B, H, positions, head_dim]."""
        end = self._length + keys_and_values.shape[1]
        if end > self.max_len:
            raise ValueError(f"the KV cache is full ({self.max_len} positions); re-anchor the context first")
        slot = self.slots[layer]
        slot[:, self._length:end] = keys_and_values
        keys, values = slot[:, :end].permute(2, 0, 3, 1, 4).unbind(0)   # each [B, H, end, head_dim], views
        return keys, values

    def advance(self, n: int) -> None:
        """Every layer has appended `n` positions."""
        self._length += n

    def reset(self) -> None:
        self._length = 0

    def weights(self, model: nn.Module) -> tuple:
        """The plain tensors `decode` reads, gathered from `model` on first use and kept for the
        rest of the generation: reading a parameter through its module costs a microsecond or two
        each time, which a sampled token cannot afford."""
        if self._weights is None:
            self._weights = _plain_weights(model)
        return self._weights


# --- one step through the cache ------------------------------------------------------------------

def _plain_weights(model: nn.Module) -> tuple:
    """What `decode` reads, gathered once: the token and position tables; per block, the first
    norm, the attention layer with its projections, the second norm and the MLP's activation with its
    weights (None, None for a block of attention alone); the final norm. The norms and the activation are the
    modules' own maths; the weights are plain tensors (no copies but the fused projections), matrices
    transposed to [in, out]."""
    blocks = []
    for block in model.blocks:
        attn, mlp = block.attn, block.mlp
        qkv_t = attn.fused_projection().t().contiguous()   # [d_in, 3 * d_out]: one matmul a token
        out = (None, None) if attn.out_proj is None else (attn.out_proj.weight.t(), attn.out_proj.bias)
        mlp_weights = None if mlp is None else (mlp.activation, mlp.c_fc.weight.t(), mlp.c_fc.bias,
                                                mlp.c_proj.weight.t(), mlp.c_proj.bias)
        ln_2 = None if block.ln_2 is None else block.ln_2.as_function()
        blocks.append((block.ln_1.as_function(), (attn, qkv_t, attn.fused_bias(), *out), ln_2, mlp_weights))
    position_table = model.wpe.weight if model.wpe is not None else None
    return model.wte.weight, position_table, blocks, model.ln_f.as_function()


def _rows_linear(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
    """`residual + x @ weight_t + bias` for rows x [N, in], in one matmul call where it can
    (F.linear and a separate addition would each add a dispatch, which is what a sampled
    token's tiny matmuls cost). `weight_t` is a linear layer's weight transposed, [in, out]."""
    if residual is None:
        return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)
    out = torch.addmm(residual, x, weight_t)
    return out if bias is None else out.add_(bias)


def _attention(x: torch.Tensor, weights: tuple, cache: KVCache, layer: int, residual: torch.Tensor,
               ablation) -> torch.Tensor:
    """`residual + attn(x)` for rows x [B * T, d_in]: for each of the cache's B sequences, T
    positions that follow the `cache.length` it holds. Each attends to itself, the new positions
    before it, and every cached position; this layer's keys and values join the cache."""
    attn, qkv_t, qkv_bias, out_t, out_bias = weights
    B = cache.batch
    T = x.shape[0] // B
    start = cache.length
    qkv = _rows_linear(x, qkv_t, qkv_bias).view(B, T, 3, attn.n_head, attn.head_dim)
    queries = qkv[:, :, 0].transpose(1, 2)                                    # [B, H, T, head_dim]
    new = qkv[:, :, 1:]                                                        # [B, T, 2, H, head_dim]
    if attn.qk_norm or attn.rotary is not None:
        queries, new_keys = attn.normalise_and_rotate(queries, new[:, :, 0].transpose(1, 2), start)
        new = torch.stack((new_keys.transpose(1, 2), new[:, :, 1]), dim=2)
    keys, values = cache.append(layer, new)
    if attn.position_bias is not None:
        # Relative positions: each head's bias for each distance, -inf for a key after its query.
        mask = attn.relative_mask(T, start).to(queries.dtype)
        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    elif T == 1:
        # A single new query may look at every cached position: no mask needed.
        context = F.scaled_dot_product_attention(queries, keys, values)
    else:
        # New query i sits at absolute position start + i and sees keys up to there.
        allowed = torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(diagonal=start)
        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
    if ablation is not None:
        context = ablation.apply(context)
    out = context.view(B, attn.d_out) if T == 1 else context.transpose(1, 2).reshape(B * T, attn.d_out)
    if out_t is None:
        return residual + out
    return _rows_linear(out, out_t, out_bias, residual)


def _mlp(x: torch.Tensor, weights: tuple, residual: torch.Tensor) -> torch.Tensor:
    """`residual + mlp(x)` for rows [N, n_embd], without dropout (sampling never trains)."""
    activation, fc_t, fc_bias, proj_t, proj_bias = weights
    return _rows_linear(activation(_rows_linear(x, fc_t, fc_bias)), proj_t, proj_bias, residual)


def decode(model: nn.Module, idx: torch.Tensor, cache: KVCache,
           ablations: list | None = None) -> torch.Tensor:
    """Logits [B, vocab] for the position after idx [B, T], whose tokens follow the
    `cache.length` positions the cache holds; adds them to the cache. `ablations` (from
    `GPT.head_ablations`, one per layer) removes heads as `GPT.forward`'s `ablate` does."""
    B, T = idx.shape
    start = cache.length
    if start + T > model.config.block_size:
        raise ValueError(f"the KV cache is full ({model.config.block_size} positions); re-anchor the context first")
    token_table, position_table, blocks, final_norm = cache.weights(model)
    x = F.embedding(idx, token_table)
    if position_table is not None:
        x = x + position_table[start:start + T]
    x = x.view(B * T, -1)
    for layer, (ln_1, attn, ln_2, mlp) in enumerate(blocks):
        ablation = None if ablations is None else ablations[layer]
        x = _attention(ln_1(x), attn, cache, layer, x, ablation)
        if mlp is not None:
            x = _mlp(ln_2(x), mlp, x)
    cache.advance(T)
    last = x.view(B, T, -1)[:, -1]
    return torch.mm(final_norm(last), token_table.t())


# --- the loop ---------------------------------------------------------------------------------------

def generate_stream(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None,
                    generator: torch.Generator | None = None, use_cache: bool = True,
                    ablate=None) -> Iterator[torch.Tensor]:
    """Yields each new token, [B, 1], as soon as it is sampled, with the heads in `ablate` removed
    (as `GPT.forward` takes it).

    temperature 0 is greedy. When the context outgrows block_size, the model
    keeps the most recent half block and goes on (re-encoding those tokens
    once), so with or without the cache it sees exactly the same context,
    and the cache saves work on all but one token in every half block.
    """
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


def _sampled(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True, ablate=None) -> Iterator[torch.Tensor]:
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError("generate needs a non-empty prompt shaped [batch, tokens]")
    block = model.config.block_size
    keep = max(1, block // 2)
    context = idx[:, -block:]
    cache = KVCache.for_model(model, idx.shape[0]) if use_cache else None
    ablations = model.head_ablations(ablate, idx.device) if ablate else None
    vocab = model.config.vocab_used or model.config.vocab_size   # rows beyond it pad the vocabulary: never sampled
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


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
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
