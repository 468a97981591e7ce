"""Causal self-attention: one layer, three ways to run it.

The maths, for each head, is the single-head causal attention of Raschka's *Build a Large
Language Model (From Scratch)*, chapter 3, which this project starts from:

    queries, keys, values = x·W_query, x·W_key, x·W_value
    attention_scores      = queries · keysᵀ                    [query_pos, key_pos]
    attention_weights     = softmax(attention_scores / sqrt(d_k)), with every key after its
                            query masked to -inf first (no peeking at the future)
    context               = attention_weights · values

`forward_with_weights` is that recipe line by line, and returns the weights shaped
`[batch, head, query_pos, key_pos]` so they can be watched. `forward` is the fast path
that trains the model: the same maths fused by `F.scaled_dot_product_attention`. `decode`
is the path for sampling: new positions attend to themselves and to the keys and values a
`KVCache` holds, so a sampled token costs one position of work. All three read the same
weights; `tests/test_attention.py` and `tests/test_model.py` prove they agree.

Names: inside the layer the softmax's output is `attention_weights`, as in the chapter.
Once it leaves the layer, a `[head, query_pos, key_pos]` (or `[batch, head, ...]`) tensor of
them is a *pattern*, TransformerLens's word, everywhere else in the project.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class KVCache:
    """What sampling keeps between tokens: the keys and values of every position seen so far,
    one slot per layer.

    Each layer's slot is [batch, position, 2, head, d_k], keys and values side by side, so a
    new position's key and value are written in one copy, and preallocated to `max_len`, so
    that copy is in place. The cache owns its length: each layer `append`s at `length`, and
    once every layer has, the model calls `advance`. For as long as the generation lasts it
    also keeps the plain tensors each layer's `decode` reads (`weights`), among them the
    three projections side by side, so a token needs one matmul for its query, key and value.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.slots = [torch.zeros(batch, max_len, 2, n_head, head_dim, device=device, dtype=dtype)
                      for _ in range(n_layer)]
        self.max_len = max_len
        self.batch = batch
        self._length = 0  # positions filled, the same in every layer
        self._weights: tuple | None = None

    @property
    def length(self) -> int:
        return self._length

    def keys(self, layer: int) -> torch.Tensor:
        """[B, H, length, d_k]: the keys held for `layer` (a view)."""
        return self.slots[layer][:, :self._length, 0].transpose(1, 2)

    def values(self, layer: int) -> torch.Tensor:
        return self.slots[layer][:, :self._length, 1].transpose(1, 2)

    def append(self, layer: int, keys_and_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stores `layer`'s keys and values [B, T, 2, H, d_k] for positions length..length+T-1;
        returns all the keys and all the values it holds for that layer, those included, each
        [B, H, positions, d_k]."""
        end = self._length + keys_and_values.shape[1]
        if end > self.max_len:
            raise ValueError(f"the KV cache is full ({self.max_len} positions); re-anchor the context first")
        slot = self.slots[layer]
        slot[:, self._length:end] = keys_and_values
        keys, values = slot[:, :end].permute(2, 0, 3, 1, 4).unbind(0)   # each [B, H, end, d_k], views
        return keys, values

    def advance(self, n: int) -> None:
        """Every layer has appended `n` positions."""
        self._length += n

    def reset(self) -> None:
        self._length = 0

    def weights(self, gather: Callable[[], tuple]) -> tuple:
        """The plain tensors the model's `decode` reads, gathered by `gather()` on first use and
        kept for the rest of the generation: reading a parameter through its module costs a
        microsecond or two each time, which a sampled token cannot afford."""
        if self._weights is None:
            self._weights = gather()
        return self._weights


def rows_linear(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None,
                residual: torch.Tensor | None = None) -> torch.Tensor:
    """`residual + x @ weight_t + bias` for rows x [N, in], in one matmul call where it can
    (F.linear and a separate addition would each add a dispatch, which is what a sampled
    token's tiny matmuls cost). `weight_t` is a linear layer's weight transposed, [in, out]."""
    if residual is None:
        return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)
    out = torch.addmm(residual, x, weight_t)
    return out if bias is None else out.add_(bias)


class Rotary(nn.Module):
    """Rotary position embedding: rotates pairs of query/key features by an
    angle proportional to the position, so q·k depends on relative distance."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head size, got {head_dim}")
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)     # [max_len, head_dim/2]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        T = x.shape[-2]
        cos = self.cos[start:start + T].to(x.dtype)
        sin = self.sin[start:start + T].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)


class SelfAttention(nn.Module):
    """Causal multi-head self-attention.

    With `n_head=1` and `out_proj=False` this is exactly the chapter-3 layer:
    softmax(q·kᵀ / sqrt(d_k), causal) · v. Accepts `[batch, seq, d_in]` or the
    unbatched `[seq, d_in]` of that chapter.
    """

    def __init__(self, d_in: int, d_out: int, n_head: int = 1, dropout: float = 0.0,
                 out_proj: bool = True, bias: bool = False, rotary: bool = False,
                 qk_norm: bool = False, max_len: int = 4096) -> None:
        super().__init__()
        if d_out % n_head != 0:
            raise ValueError(f"d_out={d_out} is not divisible by n_head={n_head}; "
                             f"choose sizes where d_out % n_head == 0")
        self.n_head = n_head
        self.head_dim = d_out // n_head
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        # Mixes the heads back together; the chapter's single head has none.
        self.out_proj = nn.Linear(d_out, d_out, bias=bias) if out_proj else None
        self.dropout = dropout
        # Options of the "modern" architecture; both off gives the classic GPT-2 layer.
        self.qk_norm = qk_norm
        self.rotary = Rotary(self.head_dim, max_len) if rotary else None

    # --- the readable path ----------------------------------------------------------

    def forward_with_weights(self, x: torch.Tensor, *, head_mask: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer written out step by step; also returns the attention weights.

        Returns (result, attention_weights) with attention_weights shaped
        [batch, head, query_pos, key_pos] ([head, query_pos, key_pos] when the
        input was unbatched).
        """
        x, unbatched = self._batched(x)
        queries, keys, values = self._project(x)                        # each [B, H, T, d_k]
        T = x.shape[1]
        d_k = keys.shape[-1]

        attention_scores = queries @ keys.transpose(-2, -1)              # [B, H, T, T]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        attention_scores = attention_scores.masked_fill(mask, float("-inf"))  # no peeking ahead
        attention_weights = torch.softmax(attention_scores / math.sqrt(d_k), dim=-1)
        mixed = attention_weights
        if self.training and self.dropout > 0:
            mixed = F.dropout(attention_weights, p=self.dropout)
        context = mixed @ values                                           # [B, H, T, d_k]

        result = self._merge(context, head_mask)
        if unbatched:
            return result.squeeze(0), attention_weights.squeeze(0)
        return result, attention_weights

    # --- the fast path: training and evaluation ------------------------------------------

    def forward(self, x: torch.Tensor, *, head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The same function as `forward_with_weights`, with score, mask, softmax and mix
        fused into one call that never materialises the weights."""
        x, unbatched = self._batched(x)
        queries, keys, values = self._project(x)
        dropout = self.dropout if self.training else 0.0
        context = F.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout, is_causal=True)
        out = self._merge(context, head_mask)
        return out.squeeze(0) if unbatched else out

    # --- the cached path: sampling -----------------------------------------------------------

    def decode(self, x: torch.Tensor, cache: KVCache, layer: int, weights: tuple,
               residual: torch.Tensor | None = None, head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B * T, d_in]: for each of the cache's B sequences, T positions that follow the
        `cache.length` it holds. Each attends to itself, the new positions before it, and
        every cached position. Appends this layer's keys and values to the cache (the model
        advances it). `weights` is what `decode_weights` returned, once per generation.
        Returns [B * T, d_out], plus `residual` when given. `head_mask` ablates heads as in `_merge`.

        The same maths as `forward`, arranged for one sampled token of a small model, where
        the arithmetic takes microseconds and the cost is in how many operations run: rows in
        2-D, one matmul for the three projections, the new keys and values copied into the
        cache at once, plain tensors gathered once per generation instead of module calls.
        """
        qkv_t, out_t, out_bias = weights
        B = cache.batch
        T = x.shape[0] // B
        start = cache.length
        qkv = torch.mm(x, qkv_t).view(B, T, 3, self.n_head, self.head_dim)
        queries = qkv[:, :, 0].transpose(1, 2)                                   # [B, H, T, d_k]
        new = qkv[:, :, 1:]                                                        # [B, T, 2, H, d_k]
        if self.qk_norm or self.rotary is not None:
            queries, new_keys = self._shape_queries_and_keys(queries, new[:, :, 0].transpose(1, 2), start)
            new = torch.stack((new_keys.transpose(1, 2), new[:, :, 1]), dim=2)
        keys, values = cache.append(layer, new)
        if T == 1:
            # A single new query may look at every cached position: no mask needed.
            context = F.scaled_dot_product_attention(queries, keys, values)
        else:
            # New query i sits at absolute position start + i and sees keys up to there.
            allowed = torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(diagonal=start)
            context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
        if head_mask is not None:
            context = context * head_mask.view(1, -1, 1, 1).to(context.dtype)
        out = context.view(B, self.d_out) if T == 1 else context.transpose(1, 2).reshape(B * T, self.d_out)
        if out_t is None:
            return out if residual is None else residual + out
        return rows_linear(out, out_t, out_bias, residual)

    def decode_weights(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """What `decode` reads: [W_query | W_key | W_value] transposed into one [d_in, 3 * d_out]
        matrix, and the output projection's weight (transposed) and bias."""
        qkv_t = torch.cat((self.W_query.weight, self.W_key.weight, self.W_value.weight)).t().contiguous()
        if self.out_proj is None:
            return qkv_t, None, None
        return qkv_t, self.out_proj.weight.t(), self.out_proj.bias

    # --- shared by all three ----------------------------------------------------------------

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_in] -> queries, keys, values, each [B, H, T, head_dim]."""
        queries = self._heads(self.W_query(x))
        keys = self._heads(self.W_key(x))
        values = self._heads(self.W_value(x))
        return (*self._shape_queries_and_keys(queries, keys, 0), values)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """[B, T, d_out] -> [B, H, T, head_dim]: each head gets its own slice of the features."""
        B, T, _ = t.shape
        return t.view(B, T, self.n_head, self.head_dim).transpose(1, 2)

    def _shape_queries_and_keys(self, queries: torch.Tensor, keys: torch.Tensor, start: int
                                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The "modern" options; `start` is the absolute position of the first row."""
        if self.qk_norm:  # bounds the logits, which lets a higher learning rate stay stable
            queries = F.rms_norm(queries, (self.head_dim,))
            keys = F.rms_norm(keys, (self.head_dim,))
        if self.rotary is not None:
            queries, keys = self.rotary(queries, start), self.rotary(keys, start)
        return queries, keys

    def _merge(self, context: torch.Tensor, head_mask: torch.Tensor | None) -> torch.Tensor:
        """context [B, H, T, head_dim] -> [B, T, d_out], through the output projection.

        `head_mask` ([H], 1 keeps a head, 0 removes it) zeroes heads before they
        are mixed: that is how a head is ablated.
        """
        if head_mask is not None:
            context = context * head_mask.view(1, -1, 1, 1).to(context.dtype)
        B, H, T, D = context.shape
        out = context.transpose(1, 2).reshape(B, T, H * D)
        return self.out_proj(out) if self.out_proj is not None else out

    @staticmethod
    def _batched(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        if x.dim() == 2:  # the chapter's unbatched [seq, dim]
            return x.unsqueeze(0), True
        if x.dim() != 3:
            raise ValueError(f"SelfAttention expects [batch, seq, dim] or [seq, dim], got shape {tuple(x.shape)}")
        return x, False
