"""One new token through a KV-cached GPT, written for speed.

With a KV cache a sampled token costs one position of work, and at the sizes
this project trains on a CPU that work is tiny: a [1, 128] x [128, 128] matmul
takes a few microseconds, about what Python and the dispatcher spend calling one
`nn.Module`. So the module path (`GPT._step`), clear as it is, spends most of a
decoded token on overhead. `TokenDecoder` does the same arithmetic on plain
tensors: attention for the single new query as two small matmuls, the norms'
and the MLP activation's own functions called directly rather than through
`nn.Module.__call__`, no no-op dropout. (Fusing the three projections into one matmul was
measured too: 2% faster, within noise, for a copy of every attention matrix.)

It reads the GPT's own parameters, no copies, writes the same `KVCache`, and
the prompt still goes through the module path. `tests/test_model.py` proves
both paths give the same logits, for both architectures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from model.attention import KVCache

if TYPE_CHECKING:  # model.gpt imports this module
    from model.gpt import GPT


@dataclass(frozen=True)
class _Layer:
    """One block's parameters, gathered once so a step only does arithmetic. The norms and
    the activation are the modules' own functions, called without the module machinery."""
    norm_1: Callable[[torch.Tensor], torch.Tensor]
    query_weight: torch.Tensor
    key_weight: torch.Tensor
    value_weight: torch.Tensor
    out_weight: torch.Tensor
    out_bias: torch.Tensor | None
    norm_2: Callable[[torch.Tensor], torch.Tensor]
    fc_weight: torch.Tensor
    fc_bias: torch.Tensor | None
    proj_weight: torch.Tensor
    proj_bias: torch.Tensor | None
    activation: Callable[[torch.Tensor], torch.Tensor]
    rotary: torch.nn.Module | None


class TokenDecoder:
    """`step(tokens)`: logits for the position after `tokens` ([batch, 1]),
    given a cache already holding everything before them."""

    def __init__(self, model: GPT, cache: KVCache) -> None:
        config = model.config
        self.cache = cache
        self.modern = config.arch == "modern"
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.token_embedding = model.wte.weight
        self.position_embedding = model.wpe.weight if model.wpe is not None else None
        self.final_norm = model.ln_f.forward
        self.layers = []
        for block in model.blocks:
            attn, mlp = block.attn, block.mlp
            self.layers.append(_Layer(
                norm_1=block.ln_1.forward, query_weight=attn.W_query.weight,
                key_weight=attn.W_key.weight, value_weight=attn.W_value.weight,
                out_weight=attn.out_proj.weight, out_bias=attn.out_proj.bias,
                norm_2=block.ln_2.forward,
                fc_weight=mlp.c_fc.weight, fc_bias=mlp.c_fc.bias,
                proj_weight=mlp.c_proj.weight, proj_bias=mlp.c_proj.bias,
                activation=mlp.activation, rotary=attn.rotary))

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, 1] -> logits [B, vocab]; appends one position to the cache."""
        cache = self.cache
        pos = cache.length
        if pos >= cache.max_len:
            raise ValueError(f"the KV cache is full ({cache.max_len} positions); re-anchor the context first")
        B, H, D = tokens.shape[0], self.n_head, self.head_dim
        x = F.embedding(tokens[:, 0], self.token_embedding)                     # [B, C]
        if self.position_embedding is not None:
            x = x + self.position_embedding[pos]
        end = pos + 1
        for i, layer in enumerate(self.layers):
            h = layer.norm_1(x)                                                  # [B, C]
            query, key, value = (F.linear(h, w).view(B, H, 1, D)                 # each [B, H, 1, D]
                                 for w in (layer.query_weight, layer.key_weight, layer.value_weight))
            if self.modern:
                query, key = F.rms_norm(query, (D,)), F.rms_norm(key, (D,))
                query, key = layer.rotary(query, pos), layer.rotary(key, pos)
            cache.keys[i][:, :, pos:end] = key
            cache.values[i][:, :, pos:end] = value
            keys, values = cache.keys[i][:, :, :end], cache.values[i][:, :, :end]
            # The newest query may look at every cached position: no mask needed.
            weights = torch.softmax((query @ keys.transpose(-2, -1)) * self.scale, dim=-1)  # [B, H, 1, end]
            context = (weights @ values).view(B, H * D)
            x = x + F.linear(context, layer.out_weight, layer.out_bias)
            hidden = layer.activation(F.linear(layer.norm_2(x), layer.fc_weight, layer.fc_bias))
            x = x + F.linear(hidden, layer.proj_weight, layer.proj_bias)
        cache.length = end
        return F.linear(self.final_norm(x), self.token_embedding)
