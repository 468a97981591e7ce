"""Causal self-attention: one layer, two ways to run it.

The maths, for each head, is the single-head causal attention of Raschka's *Build a Large
Language Model (From Scratch)*, chapter 3, which this project starts from:

    queries, keys, values = x·W_query, x·W_key, x·W_value
    attention_scores      = queries · keysᵀ                    [query_pos, key_pos]
    attention_weights     = softmax(attention_scores / sqrt(d_k) + mask), the mask -inf for every
                            key after its query (no peeking at the future), 0 elsewhere
    context               = attention_weights · values

`forward_with_weights` is that recipe line by line, and returns the weights shaped
`[batch, head, query_pos, key_pos]` so they can be watched. `forward` is the fast path that trains
the model and samples from it (against a KV cache, `model/sampling.py`): the same maths fused by
`F.scaled_dot_product_attention`. Both read the same weights and the same `mask`;
`tests/test_attention.py` and `tests/test_model.py` prove they agree.

With `relative_positions`, each head also has a learned bias for each distance between query and key,
`position_bias` [head, distance], in its mask (Shaw et al. 2018; T5's relative bias, without its buckets):
mask[head, query_pos, key_pos] = POSITION_BIAS_SCALE * position_bias[head, query_pos - key_pos].

Names: inside the layer the softmax's output is `attention_weights`, as in the chapter, and a
head's width is the chapter's `d_k`; everywhere else that width is `head_dim`, and a
`[head, query_pos, key_pos]` (or `[batch, head, ...]`) tensor of weights is a *pattern*,
TransformerLens's word.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

if TYPE_CHECKING:
    from model.sampling import LayerCache


@dataclass(frozen=True)
class HeadAblation:
    """One layer's part of an `Ablation` (model/ablation.py), as `GPT.head_ablations` makes it.
    `keep` [n_head] is 1 for a head that stays and 0 for one removed; a removed head's output is
    replaced by zeros (zero-ablation, `fill` None) or by `fill` [n_head, head_dim], its mean output
    over some text (mean-ablation)."""

    keep: torch.Tensor
    fill: torch.Tensor | None = None

    def apply(self, context: torch.Tensor) -> torch.Tensor:
        """context [B, H, T, head_dim], every head's output, with the removed heads replaced."""
        out = context * self.keep.view(1, -1, 1, 1).to(context.dtype)
        if self.fill is None:
            return out
        removed = (1 - self.keep).view(-1, 1).to(context.dtype)  # [H, 1]
        return out + (removed * self.fill.to(context.dtype)).unsqueeze(1)  # + [H, 1, head_dim]


# The scores get POSITION_BIAS_SCALE x position_bias: the table is kept in units of 1/16 of a logit. A head
# needs a bias of several logits to prefer one distance, while the weights around it are about 0.02, and
# AdamW moves every parameter by about the learning rate a step, whatever its size: a table in plain logits
# (scale 1) takes a thousand steps to get there, and a 2-layer attention-only model's previous-token and
# induction heads formed 2-3x later, or not within 3,000 steps. Scales 8 and 16 both work; 16 earliest.
POSITION_BIAS_SCALE = 16
ROTARY_BASE = 10000  # feature pair i turns by position x ROTARY_BASE^(-2i / head_dim), as in RoFormer


class Rotary(nn.Module):
    """Rotary position embedding: rotates pairs of query/key features by an
    angle proportional to the position, so q·k depends on relative distance."""

    def __init__(self, head_dim: int, max_len: int) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head size, got {head_dim}")
        inv_freq = 1.0 / ROTARY_BASE ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)  # [max_len, head_dim/2]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        T = x.shape[-2]
        cos = self.cos[start : start + T].to(x.dtype)
        sin = self.sin[start : start + T].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)


class SelfAttention(nn.Module):
    """Causal multi-head self-attention.

    With `n_head=1` and `out_proj=False` this is exactly the chapter-3 layer:
    softmax(q·kᵀ / sqrt(d_k), causal) · v. Accepts `[batch, seq, d_in]` or the
    unbatched `[seq, d_in]` of that chapter.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        n_head: int = 1,
        dropout: float = 0.0,
        out_proj: bool = True,
        bias: bool = False,
        rotary: bool = False,
        qk_norm: bool = False,
        max_len: int = 4096,
        qkv_bias: bool = False,
        relative_positions: bool = False,
    ) -> None:
        super().__init__()
        if d_out % n_head != 0:
            raise ValueError(
                f"d_out={d_out} is not divisible by n_head={n_head}; choose sizes where d_out % n_head == 0"
            )
        self.n_head = n_head
        self.head_dim = d_out // n_head
        self.d_out = d_out
        # The chapter's projections have no biases; GPT-2's own weights have them (`qkv_bias`).
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        # Mixes the heads back together; the chapter's single head has none.
        self.out_proj = nn.Linear(d_out, d_out, bias=bias) if out_proj else None
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)  # on the output, where it joins a block's residual stream
        # Options of the "modern" architecture; both off gives the classic GPT-2 layer.
        self.qk_norm = qk_norm
        self.rotary = Rotary(self.head_dim, max_len) if rotary else None
        # A bias per head and distance (query_pos - key_pos: 0 to max_len - 1), zero at first: no distance preferred.
        self.position_bias = nn.Parameter(torch.zeros(n_head, max_len)) if relative_positions else None

    # --- the readable path ----------------------------------------------------------

    def forward_with_weights(
        self, x: torch.Tensor, *, ablation: HeadAblation | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer written out step by step; also returns the attention weights, [batch, head, query_pos,
        key_pos] ([head, query_pos, key_pos] when the input was unbatched)."""
        x, unbatched = self._batched(x)
        queries, keys, values = self._project(x)  # each [B, H, T, d_k]
        d_k = keys.shape[-1]

        attention_scores = queries @ keys.transpose(-2, -1)  # [B, H, T, T]
        scaled_scores = attention_scores / math.sqrt(d_k) + self.mask(x.shape[1]).to(attention_scores.dtype)
        attention_weights = torch.softmax(scaled_scores, dim=-1)
        mixed = attention_weights
        if self.training and self.dropout > 0:
            mixed = F.dropout(attention_weights, p=self.dropout)
        context = mixed @ values  # [B, H, T, d_k]

        result = self._merge(context, ablation)
        if unbatched:
            return result.squeeze(0), attention_weights.squeeze(0)
        return result, attention_weights

    # --- the fast path: training, evaluation and sampling ------------------------------------

    def forward(
        self,
        x: torch.Tensor,
        *,
        ablation: HeadAblation | None = None,
        cache: LayerCache | None = None,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The same function as `forward_with_weights`, with score, mask, softmax and mix fused into one call
        that never materialises the weights; with a `residual` (a block's stream), the residual plus it. With a
        `cache` (sampling), x holds rows [B * T, d_in]: T positions after the `cache.length` that the cache holds
        for each of its B sequences, which attend to those too and join them; the output, rows as well, is added
        to `residual` inside the output projection's matmul (`model/sampling.py` says why)."""
        if cache is None:
            x, unbatched = self._batched(x)
            start, T = 0, x.shape[1]
            queries, keys, values = self._project(x)
        else:  # the three projections are one matmul, the cache's `qkv`; the new keys and values join the cache
            start, B = cache.length, cache.batch
            T = x.shape[0] // B
            qkv = rows_linear(x, *cache.qkv).view(B, T, 3, self.n_head, self.head_dim)
            queries = qkv[:, :, 0].transpose(1, 2)  # [B, H, T, head_dim]
            new = qkv[:, :, 1:]  # [B, T, 2, H, head_dim]
            if self.qk_norm or self.rotary is not None:
                queries, new_keys = self.normalise_and_rotate(queries, new[:, :, 0].transpose(1, 2), start)
                new = torch.stack((new_keys.transpose(1, 2), new[:, :, 1]), dim=2)
            keys, values = cache.append(new)  # all it holds, each [B, H, positions, head_dim]
        dropout = self.dropout if self.training and cache is None else 0.0  # sampling drops nothing
        if self.position_bias is None and (start == 0 or T == 1):
            # SDPA's own causal mask; a single query after the cache needs none, it sees every key
            context = F.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout, is_causal=start == 0)
        else:
            mask = self.mask(T, start).to(queries.dtype)
            context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, dropout_p=dropout)
        if cache is None:
            out = self._merge(context, ablation)
            out = out.squeeze(0) if unbatched else out
            return out if residual is None else residual + self.resid_dropout(out)
        if ablation is not None:
            context = ablation.apply(context)
        rows = context.view(B, self.d_out) if T == 1 else context.transpose(1, 2).reshape(B * T, self.d_out)
        return rows_linear(rows, *cache.out_proj, residual)

    # --- shared by the paths ---------------------------------------------------------------

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_in] -> queries, keys, values, each [B, H, T, head_dim], each head its own slice of the
        features."""
        B, T, _ = x.shape
        queries, keys, values = (
            W(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
            for W in (self.W_query, self.W_key, self.W_value)
        )
        return (*self.normalise_and_rotate(queries, keys, 0), values)

    def fused_projection(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`_project`'s three projections as one linear layer: [W_query; W_key; W_value] transposed, [d_in,
        3 * d_out] (GPT-2's `c_attn`), and their biases (None: none)."""
        weight_t = torch.cat((self.W_query.weight, self.W_key.weight, self.W_value.weight)).t().contiguous()
        if self.W_query.bias is None:
            return weight_t, None
        return weight_t, torch.cat((self.W_query.bias, self.W_key.bias, self.W_value.bias))

    def normalise_and_rotate(
        self, queries: torch.Tensor, keys: torch.Tensor, start: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The "modern" options, QK-norm then rotary positions (neither for "gpt2"); `start` is the
        absolute position of the first row."""
        if self.qk_norm:  # bounds the logits, which lets a higher learning rate stay stable
            queries = F.rms_norm(queries, (self.head_dim,))
            keys = F.rms_norm(keys, (self.head_dim,))
        if self.rotary is not None:
            queries, keys = self.rotary(queries, start), self.rotary(keys, start)
        return queries, keys

    def mask(self, n_queries: int, start: int = 0) -> torch.Tensor:
        """What is added to the scaled scores of `n_queries` queries at positions start, start + 1, ... against
        the keys at 0 up to the last query: -inf where the key comes after the query (the causal mask) and,
        with relative positions, each head's bias for the distance query_pos - key_pos ([head, query, key];
        [query, key] without)."""
        table = self.position_bias
        device = self.W_query.weight.device if table is None else table.device
        positions = torch.arange(start + n_queries, device=device)
        distance = positions[start:, None] - positions  # [query, key]
        if table is None:
            bias = torch.zeros(distance.shape, device=device)
        else:
            bias = POSITION_BIAS_SCALE * table[:, distance.clamp(min=0)]
        return bias.masked_fill(distance < 0, float("-inf"))

    def _merge(self, context: torch.Tensor, ablation: HeadAblation | None) -> torch.Tensor:
        """context [B, H, T, head_dim] -> [B, T, d_out], through the output projection. `ablation` replaces the
        output of the heads it removes before the heads are mixed: that is how a head is ablated."""
        if ablation is not None:
            context = ablation.apply(context)
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


def rows_linear(
    x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """`residual + x @ weight_t + bias` for rows x [N, in], the cached path's linear layer: one matmul call where
    it can, the first addition inside it (F.linear transposes the weight on each call, and it and a separate
    addition each add operations, which is what a sampled token's tiny matmuls cost). `weight_t` is a linear
    layer's weight transposed, [in, out]."""
    if residual is None:
        return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)
    out = torch.addmm(residual, x, weight_t)
    return out if bias is None else out.add_(bias)
