"""Sampling: new text one token at a time, with a KV cache. A reader of the model can skip it.

- `KVCache`: what a generation keeps between tokens: each layer's keys and values so far, so a new token
  attends to them without recomputing them, and the plain tensors the step reads.
- `decode`: one step of the model for new positions against the cache: `Block.forward`'s function, written
  again for speed. At a small model's single token the arithmetic takes microseconds and the cost is in how
  many operations run, so the step sees rows of a 2-D tensor, the three projections are one matmul, the
  residual additions happen inside the matmuls, the norms are bound as functions and the weights are plain
  tensors gathered once per generation: reading a parameter through its module costs about a microsecond
  each time.
- `generate_stream` / `generate`: the loop, and `sample_next`, the sampling maths (temperature, top-k, top-p).

It reads the model's weights and nothing else of it; `tests/test_model.py` proves, for every model option,
that `decode` gives the logits `GPT.forward` gives, and that sampling with and without the cache gives the
same text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.hooks import Edit, Edits, site_name


class LayerCache:
    """One block's part of a `KVCache`: `slot`, its keys and values [batch, position, 2, head, head_dim], side by
    side so a new position's are written in one copy, preallocated so that copy is in place; and what the step
    reads instead of the block's modules: the norms as functions, the three projections as one (`qkv`), the
    weights of `out_proj` and of the MLP transposed, and the attention's options."""

    def __init__(self, block: nn.Module, batch: int, max_len: int, like: torch.Tensor) -> None:
        attn, mlp = block.attn, block.mlp
        self.slot = torch.zeros(batch, max_len, 2, attn.n_head, attn.head_dim, device=like.device, dtype=like.dtype)
        self.batch = batch
        self.length = 0  # positions filled: the KVCache's, kept here too so the step reads it in one lookup
        self.heads = attn.n_head, attn.head_dim
        self.ln_1 = norm_function(block.ln_1)
        self.qkv = fused_projection(attn)
        self.qk_norm = attn.qk_norm
        self.rotary = None if attn.rotary is None else attn.rotary.forward  # without the module call's hooks
        self.relative_bias = None if attn.position_bias is None else attn.relative_bias
        self.out_proj = (attn.out_proj.weight.t(), attn.out_proj.bias)
        self.ln_2 = None if mlp is None else norm_function(block.ln_2)
        self.mlp = None if mlp is None else (mlp.c_fc.weight.t(), mlp.c_fc.bias, mlp.c_proj.weight.t(), mlp.c_proj.bias)
        self.activation = None if mlp is None else mlp.activation

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
        self.final_norm = norm_function(model.ln_f)
        self.layers = [LayerCache(block, batch, model.config.block_size, self.tokens) for block in model.blocks]
        self.no_edits = [None] * len(self.layers)
        self.length = 0

    def advance(self, n: int) -> None:
        """Every layer has appended `n` positions."""
        self.length += n
        for layer in self.layers:
            layer.length = self.length

    def reset(self) -> None:
        self.advance(-self.length)


def decode(
    model: nn.Module, idx: torch.Tensor, cache: KVCache, z_edits: list[Edit | None] | None = None
) -> torch.Tensor:
    """Logits [B, vocab] for the position after idx [B, T], whose tokens follow the `cache.length` positions the
    cache holds; adds them to the cache. `z_edits` (one per layer, `head_output_edits`) act on the heads' outputs as
    the readable path's `hook_z` edits do."""
    B, T = idx.shape
    start = cache.length
    if start + T > model.config.block_size:
        raise ValueError(f"the KV cache is full ({model.config.block_size} positions); re-anchor the context first")
    x = F.embedding(idx, cache.tokens)
    if cache.positions is not None:
        x = x + cache.positions[start : start + T]
    x = x.view(B * T, -1)
    for layer, edit in zip(cache.layers, z_edits or cache.no_edits, strict=True):
        x = attention_step(layer, x, edit)  # x + attn(ln_1(x))
        if layer.mlp is not None:
            fc_t, fc_bias, proj_t, proj_bias = layer.mlp
            x = linear(layer.activation(linear(layer.ln_2(x), fc_t, fc_bias)), proj_t, proj_bias, x)  # x + mlp(ln_2(x))
    cache.advance(T)
    return torch.mm(cache.final_norm(x.view(B, T, -1)[:, -1]), cache.tokens.t())


def attention_step(layer: LayerCache, x: torch.Tensor, z_edit: Edit | None = None) -> torch.Tensor:
    """x + SelfAttention(ln_1(x)) for rows x [B * T, n_embd]: T new positions of each of the layer's B sequences
    after the `layer.length` it holds, which they attend to too and join. `z_edit` acts on the heads' outputs
    [B, T, H, D], as at the readable path's `hook_z`."""
    B, start = layer.batch, layer.length
    T = x.shape[0] // B
    H, D = layer.heads
    qkv = linear(layer.ln_1(x), *layer.qkv).view(B, T, 3, H, D)
    queries = qkv[:, :, 0].transpose(1, 2)  # [B, H, T, D]
    new = qkv[:, :, 1:]  # [B, T, 2, H, D]: the new keys and values, as the cache holds them
    if layer.qk_norm or layer.rotary is not None:  # the "modern" options, the rotation at the positions' offset
        keys = new[:, :, 0].transpose(1, 2)
        if layer.qk_norm:
            queries, keys = F.rms_norm(queries, (D,)), F.rms_norm(keys, (D,))
        if layer.rotary is not None:
            queries, keys = layer.rotary(queries, start), layer.rotary(keys, start)
        new = torch.stack((keys.transpose(1, 2), new[:, :, 1]), dim=2)
    keys, values = layer.append(new)  # all it holds, each [B, H, positions, D]
    if layer.relative_bias is None and (start == 0 or T == 1):
        # SDPA's own causal mask; a single query after the cache needs none, it sees every key
        context = F.scaled_dot_product_attention(queries, keys, values, is_causal=start == 0)
    else:  # the mask at the offset: each head's bias (zeros without), -inf where a key comes after its query
        shape = (T, start + T)
        mask = torch.zeros(shape, device=x.device) if layer.relative_bias is None else layer.relative_bias(T, start)
        if T > 1:  # a single query has no key after it
            future = torch.triu(torch.ones(shape, device=x.device), diagonal=start + 1).bool()
            mask = mask.masked_fill(future, float("-inf"))
        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask.to(queries.dtype))
    heads = context.transpose(1, 2)  # [B, T, H, D], as at the readable path's hook_z (a view for one token)
    rows = (heads if z_edit is None else z_edit(heads)).reshape(B * T, H * D)
    return linear(rows, *layer.out_proj, x)


def linear(
    x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """`residual + x @ weight_t + bias` for rows x [N, in], the step's linear layer: one matmul call where it can,
    the first addition inside it (F.linear transposes the weight on each call, and it and a separate addition
    each add operations, which is what a sampled token's tiny matmuls cost). `weight_t` is a linear layer's
    weight transposed, [in, out]."""
    if residual is None:
        return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)
    out = torch.addmm(residual, x, weight_t)
    return out if bias is None else out.add_(bias)


def fused_projection(attn: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A `SelfAttention`'s three projections as one linear layer: [W_query; W_key; W_value] transposed, [d_in,
    3 * d_out] (GPT-2's `c_attn`), and their biases (None: none)."""
    weight_t = torch.cat((attn.W_query.weight, attn.W_key.weight, attn.W_value.weight)).t().contiguous()
    if attn.W_query.bias is None:
        return weight_t, None
    return weight_t, torch.cat((attn.W_query.bias, attn.W_key.bias, attn.W_value.bias))


def norm_function(norm: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A `Norm` (model/gpt.py) as a function of x alone, its weights bound: the operation F.rms_norm or
    F.layer_norm calls, without their Python wrappers, which cost a sampled token more."""
    if norm.weight is None:
        return partial(torch.rms_norm, normalized_shape=norm.shape)
    return partial(torch.layer_norm, normalized_shape=norm.shape, weight=norm.weight, bias=norm.bias, eps=norm.eps)


# --- the loop ---------------------------------------------------------------------------------------


def generate_stream(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, **options) -> Iterator[torch.Tensor]:
    """Yields each new token, [B, 1], as soon as it is sampled. The options (`_sampled`'s): temperature (0 is greedy),
    top_k, top_p, generator, use_cache (default True), and edits acting at their sites (model/hooks.py; with the
    cache, those of the heads' outputs only: a head removed). When the context outgrows block_size, the model keeps
    the most recent half block and goes on (re-encoding those tokens once), so with or without the cache it sees
    exactly the same context, and the cache saves work on all but one token in every half block."""
    tokens = _sampled(model, idx, max_new_tokens, **options)
    while True:
        with sampling_mode():  # around each token only: the caller's code between tokens runs as usual
            token = next(tokens, None)
        if token is None:
            return
        yield token


def generate(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, **options) -> torch.Tensor:
    """idx [B, T] -> [B, T + max_new_tokens]; see `generate_stream` for options. In sampling's mode once for every
    token: entering it for each, as `generate_stream` must, costs a tenth of a small model's decode."""
    with sampling_mode():
        new = list(_sampled(model, idx, max_new_tokens, **options))
    return torch.cat([idx, *new], dim=1)


def _sampled(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    edits: Edits | None = None,
) -> Iterator[torch.Tensor]:
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError("generate needs a non-empty prompt shaped [batch, tokens]")
    block = model.config.block_size
    keep = max(1, block // 2)
    context = idx[:, -block:]
    cache = KVCache(model, idx.shape[0]) if use_cache else None
    z_edits = head_output_edits(model, edits) if edits and use_cache else None
    vocab = model.config.vocab_used or model.config.vocab_size  # rows beyond it pad the vocabulary: never sampled
    pending = context  # tokens not yet in the cache
    for _ in range(max_new_tokens):
        if cache is None and edits:  # the readable path, where every site is
            last = torch.full((context.shape[0],), context.shape[1] - 1, device=context.device)
            logits = model.run_with_cache(context, edits=edits, logits_at=last)[0]
        elif cache is None:
            logits = model(context)[0][:, -1]
        else:
            logits = decode(model, pending, cache, z_edits)
        next_token = sample_next(logits[:, :vocab], temperature, top_k, top_p, generator)
        yield next_token
        context = torch.cat([context, next_token], dim=1)
        pending = next_token
        if context.shape[1] > block:
            context = context[:, -keep:]
            pending = context
            if cache is not None:
                cache.reset()


def head_output_edits(model: nn.Module, edits: Edits) -> list[Edit | None]:
    """Each layer's edit of its heads' outputs (`hook_z`), for `decode`; a ValueError for an edit elsewhere, which
    the cached step has no site for."""
    names = [site_name("z", layer) for layer in range(model.config.n_layer)]
    elsewhere = sorted(set(edits) - set(names))
    if elsewhere:
        raise ValueError(
            f"sampling with the KV cache edits heads' outputs (hook_z) only, not {', '.join(elsewhere)}; "
            f"give use_cache=False"
        )
    return [edits.get(name) for name in names]


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
