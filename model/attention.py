"""Causal self-attention: one layer, two ways to run it.

The maths, for each head, is the single-head causal attention of Raschka's *Build a Large
Language Model (From Scratch)*, chapter 3, which this project starts from:

    queries, keys, values = x·W_query, x·W_key, x·W_value
    attention_scores      = queries · keysᵀ                    [query_pos, key_pos]
                            -inf for every key after its query (no peeking at the future)
    attention_weights     = softmax(attention_scores / sqrt(d_k))
    context               = attention_weights · values

`forward_with_weights` is that recipe line by line, and returns the weights shaped
`[batch, head, query_pos, key_pos]` so they can be watched. `forward` is the fast path that trains
the model: the same maths fused by `F.scaled_dot_product_attention`, which never materialises the
weights. Both read the same weights; `tests/test_attention.py` and `tests/test_model.py` prove they
agree. Sampling reads them too, through a step of its own built for speed (`model/sampling.py`).

With `relative_positions`, each head also has a learned bias for each distance between query and key,
`position_bias` [head, distance], added to the scaled scores (Shaw et al. 2018; T5's relative bias,
without its buckets): POSITION_BIAS_SCALE * position_bias[head, query_pos - key_pos].

The readable path passes the queries, keys, values, weights and each head's output through named sites
(`hook_q`, ..., `hook_z`: model/hooks.py), where an analysis reads them or puts others in their place; a site
does nothing unless something is attached to it, and the fast path has none.

Names: inside the layer the softmax's output is `attention_weights`, as in the chapter, and a
head's width is the chapter's `d_k`; everywhere else that width is `head_dim`, and a
`[head, query_pos, key_pos]` (or `[batch, head, ...]`) tensor of weights is a *pattern*,
TransformerLens's word.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.hooks import Site


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
        # Where the readable path shows what an analysis reads (model/hooks.py); the fast path skips them.
        self.hook_q, self.hook_k, self.hook_v, self.hook_pattern, self.hook_z = (Site() for _ in range(5))

    # --- the readable path ----------------------------------------------------------

    def forward_with_weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer written out step by step; also returns the attention weights, [batch, head, query_pos,
        key_pos] ([head, query_pos, key_pos] when the input was unbatched). What an analysis reads passes through
        the sites `hook_q`, `hook_k`, `hook_v`, `hook_pattern` and `hook_z` (model/hooks.py)."""
        queries, keys, values = self._project(x, self.hook_q, self.hook_k, self.hook_v)  # each [B, H, T, d_k]
        T, d_k = keys.shape[-2:]

        attention_scores = queries @ keys.transpose(-2, -1)  # [B, H, T, T]
        mask = torch.triu(torch.ones(T, T, device=x.device), diagonal=1)  # 1 where the key comes after the query
        attention_scores = attention_scores.masked_fill(mask.bool(), float("-inf"))
        scaled_scores = attention_scores / math.sqrt(d_k)
        if self.position_bias is not None:  # each head's preference for each distance, in logits
            scaled_scores = scaled_scores + self.relative_bias(T).to(scaled_scores.dtype)  # + [H, T, T]
        attention_weights = self.hook_pattern(torch.softmax(scaled_scores, dim=-1))  # [B, H, T, T]
        mixed = attention_weights
        if self.training and self.dropout > 0:
            mixed = F.dropout(attention_weights, p=self.dropout)
        context = mixed @ values  # [B, H, T, d_k]

        return self.resid_dropout(self._merge(context, self.hook_z)), attention_weights

    # --- the fast path: training and evaluation ------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The same function as `forward_with_weights`, with score, mask, softmax and mix fused into one call
        that never materialises the weights."""
        queries, keys, values = self._project(x)  # each [B, H, T, d_k]
        T = queries.shape[-2]
        dropout = self.dropout if self.training else 0.0
        if self.position_bias is None:  # SDPA's own causal mask: passing one instead would switch kernels
            context = F.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout, is_causal=True)
        else:  # is_causal takes no mask beside it, so this one holds both the biases and the -inf above the diagonal
            future = torch.triu(torch.ones(T, T, device=x.device), diagonal=1).bool()
            mask = self.relative_bias(T).masked_fill(future, float("-inf")).to(queries.dtype)  # [H, T, T]
            context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, dropout_p=dropout)
        return self.resid_dropout(self._merge(context))

    # --- shared by the paths ---------------------------------------------------------------

    def _project(self, x: torch.Tensor, *sites: Site) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_in] -> queries, keys, values, each [B, H, T, head_dim], each head its own slice of the
        features, each through its site when `sites` are given (the readable path's); then the "modern" options,
        QK-norm and rotary positions (neither for "gpt2"). The chapter's unbatched x [T, d_in] gives
        [H, T, head_dim], and every step after works on either."""
        if x.dim() not in (2, 3):
            raise ValueError(f"SelfAttention expects [batch, seq, dim] or [seq, dim], got shape {tuple(x.shape)}")
        shape = (*x.shape[:-1], self.n_head, self.head_dim)  # [B, T, H, head_dim]
        projected = [W(x).view(shape) for W in (self.W_query, self.W_key, self.W_value)]
        if sites:  # the readable path: each through its site
            projected = [site(p) for site, p in zip(sites, projected, strict=True)]
        queries, keys, values = (p.transpose(-3, -2) for p in projected)
        if self.qk_norm:  # bounds the logits, which lets a higher learning rate stay stable
            queries = F.rms_norm(queries, (self.head_dim,))
            keys = F.rms_norm(keys, (self.head_dim,))
        if self.rotary is not None:
            queries, keys = self.rotary(queries), self.rotary(keys)
        return queries, keys, values

    def relative_bias(self, n_queries: int, start: int = 0) -> torch.Tensor:
        """Each head's bias for the distance query_pos - key_pos, [head, query, key], for `n_queries` queries at
        positions start, start + 1, ... (from 0, but where sampling continues a sequence) against the keys at 0
        up to the last query. A key after its query gets distance 0's: the causal mask hides it anyway."""
        positions = torch.arange(start + n_queries, device=self.position_bias.device)
        distance = positions[start:, None] - positions  # [query, key]
        return POSITION_BIAS_SCALE * self.position_bias[:, distance.clamp(min=0)]

    def _merge(self, context: torch.Tensor, site: Site | None = None) -> torch.Tensor:
        """context [B, H, T, head_dim] -> [B, T, d_out], the heads side by side (through `site` on the readable path:
        where a head is removed or patched), through the output projection."""
        heads = context.transpose(-3, -2)  # [B, T, H, head_dim]
        if site is not None:
            heads = site(heads)
        out = heads.flatten(-2)  # [B, T, H * head_dim]
        return self.out_proj(out) if self.out_proj is not None else out


# --- positions --------------------------------------------------------------------------------

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

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x [..., T, head_dim] rotated as positions start, start + 1, ...: from 0, but where sampling
        continues a sequence whose earlier positions it holds (model/sampling.py)."""
        T = x.shape[-2]
        cos = self.cos[start : start + T].to(x.dtype)
        sin = self.sin[start : start + T].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)
