"""Causal self-attention: one layer, two ways to run it.

`forward` is the fast path used for training and sampling: it calls
`F.scaled_dot_product_attention`, which fuses score, mask, softmax and mix.

`forward_with_weights` is the readable path: the same weights, the same maths,
spelled out step by step as in the reference explanation, and it returns the
attention weights shaped `[batch, head, query_pos, key_pos]` so they can be
watched. A test proves the two paths agree.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class KVCache:
    """Keys and values of every position seen so far, one slot per layer.

    Preallocated to `max_len` so each new token writes in place: a sampled
    token then costs one position of work, not the whole context.
    """

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        shape = (batch, n_head, max_len, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.length = 0  # positions filled, the same in every layer
        self.max_len = max_len

    def reset(self) -> None:
        self.length = 0


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

    With `n_head=1` and `out_proj=False` this is exactly the reference
    explanation's layer: softmax(q·kᵀ / sqrt(d_k), causal) · v.
    Accepts `[batch, seq, d_in]` or the explanation's unbatched `[seq, d_in]`.
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
        # Mixes the heads back together; the explanation's single head has none.
        self.out_proj = nn.Linear(d_out, d_out, bias=bias) if out_proj else None
        self.dropout = dropout
        # Options of the "modern" architecture; both off gives the classic GPT-2 layer.
        self.qk_norm = qk_norm
        self.rotary = Rotary(self.head_dim, max_len) if rotary else None

    # --- shared by both paths -------------------------------------------------

    def _project(self, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d_in] -> queries, keys, values, each [B, H, T, head_dim].

        `start` is the absolute position of x's first row (non-zero when
        sampling with a KV cache); only rotary embeddings need it.
        """
        B, T, _ = x.shape
        queries = self.W_query(x)
        keys = self.W_key(x)
        values = self.W_value(x)

        def split_heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, self.n_head, self.head_dim).transpose(1, 2)

        queries, keys, values = split_heads(queries), split_heads(keys), split_heads(values)
        if self.qk_norm:  # bounds the logits, which lets a higher learning rate stay stable
            queries = F.rms_norm(queries, (self.head_dim,))
            keys = F.rms_norm(keys, (self.head_dim,))
        if self.rotary is not None:
            queries, keys = self.rotary(queries, start), self.rotary(keys, start)
        return queries, keys, values

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
        if x.dim() == 2:  # the explanation's unbatched [seq, dim]
            return x.unsqueeze(0), True
        if x.dim() != 3:
            raise ValueError(f"SelfAttention expects [batch, seq, dim] or [seq, dim], got shape {tuple(x.shape)}")
        return x, False

    # --- fast path --------------------------------------------------------------

    def forward(self, x: torch.Tensor, *, cache: KVCache | None = None, layer: int = 0,
                head_mask: torch.Tensor | None = None) -> torch.Tensor:
        x, unbatched = self._batched(x)
        queries, keys, values = self._project(x, cache.length if cache is not None else 0)
        T = x.shape[1]
        dropout = self.dropout if self.training else 0.0
        if cache is None:
            context = F.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout, is_causal=True)
        else:
            start = cache.length
            end = start + T
            cache.keys[layer][:, :, start:end] = keys
            cache.values[layer][:, :, start:end] = values
            keys = cache.keys[layer][:, :, :end]
            values = cache.values[layer][:, :, :end]
            if T == 1:
                # A single new query may look at every cached position: no mask needed.
                context = F.scaled_dot_product_attention(queries, keys, values)
            else:
                # New query i sits at absolute position start + i and sees keys up to there.
                allowed = torch.ones(T, end, dtype=torch.bool, device=x.device).tril(diagonal=start)
                context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed)
        out = self._merge(context, head_mask)
        return out.squeeze(0) if unbatched else out

    # --- readable path ----------------------------------------------------------

    def forward_with_weights(self, x: torch.Tensor, *, head_mask: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same function as `forward`, written out; also returns the weights.

        Returns (result, attention_weights) with attention_weights shaped
        [batch, head, query_pos, key_pos] ([head, query_pos, key_pos] when the
        input was unbatched).
        """
        x, unbatched = self._batched(x)
        queries, keys, values = self._project(x)
        T = x.shape[1]
        d_k = keys.shape[-1]

        attention_scores = queries @ keys.transpose(-2, -1)          # [B, H, T, T]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        attention_scores = attention_scores.masked_fill(mask, float("-inf"))  # no peeking ahead
        attention_weights = torch.softmax(attention_scores / math.sqrt(d_k), dim=-1)
        mixed = attention_weights
        if self.training and self.dropout > 0:
            mixed = F.dropout(attention_weights, p=self.dropout)
        context = mixed @ values                                       # [B, H, T, head_dim]

        result = self._merge(context, head_mask)
        if unbatched:
            return result.squeeze(0), attention_weights.squeeze(0)
        return result, attention_weights
