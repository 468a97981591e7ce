"""A GPT: token and position embeddings, a stack of pre-norm transformer blocks built
around `SelfAttention`, a final norm and an output head tied to the token embedding.

Two architectures share this file:
- "gpt2" (default, for teaching): learned positions, LayerNorm, GELU MLP.
- "modern": rotary positions, QK-norm, parameter-free RMSNorm, ReLU² MLP and
  zero-initialised output projections, which trains faster at small scale.
Two options change either: `attn_only` (blocks of attention alone, the toy models of Elhage et al.
2021) and, for "gpt2", `relative_positions` (a learned bias per head and distance in every attention
layer, `model/attention.py`, instead of the position table).

Data takes one of the two paths of `SelfAttention` through it: `forward` (training and evaluation) or
`forward_with_attention` (the readable path, returning every layer's attention pattern). Only the readable path
has named sites (model/hooks.py), where an analysis reads activations or puts others in their place:
`run_with_cache`. Sampling (`model/sampling.py`) reads the same weights through a step of its own, built for speed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

import model.sampling as sampling
from model.attention import SelfAttention
from model.config import GPTConfig
from model.hooks import Cache, Edits, Site, attached

LN_EPS = 1e-5  # LayerNorm's epsilon, GPT-2's (the exporters tell TransformerLens and transformers this one)


def is_matrix(name: str, param: torch.Tensor) -> bool:
    """Whether parameter `name` is a weight matrix, what weight decay and Muon are for: every parameter of two or
    more dimensions but a relative position table (`position_bias`, [head, distance]), a table of biases: decay
    would pull them to 0, and Muon's orthogonalised update would mix one head's distances with another's."""
    return param.dim() >= 2 and not name.endswith("position_bias")


class Norm(nn.Module):
    """LayerNorm (optional bias) for "gpt2"; parameter-free RMSNorm for "modern"."""

    def __init__(self, dim: int, config: GPTConfig) -> None:
        super().__init__()
        self.shape = (dim,)
        self.eps = LN_EPS  # LayerNorm's; RMSNorm keeps torch's default
        self.weight = None if config.modern else nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if config.bias and not config.modern else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            return F.rms_norm(x, self.shape)
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.mlp_width, bias=config.bias)
        self.c_proj = nn.Linear(config.mlp_width, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.modern = config.modern
        self.gelu_approximation = "tanh" if config.activation == "gelu_tanh" else "none"

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        return F.relu(h).square() if self.modern else F.gelu(h, approximate=self.gelu_approximation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.activation(self.c_fc(x))))


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x)); with `attn_only`, the first alone (no ln_2, no mlp)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = Norm(config.n_embd, config)
        self.attn = SelfAttention(
            config.n_embd,
            config.n_embd,
            config.n_head,
            config.dropout,
            out_proj=True,
            bias=config.bias,
            rotary=config.modern,
            qk_norm=config.modern,
            max_len=config.block_size,
            qkv_bias=config.qkv_bias,
            relative_positions=config.relative_positions,
        )
        self.ln_2 = None if config.attn_only else Norm(config.n_embd, config)
        self.mlp = None if config.attn_only else MLP(config)
        # Where the readable path shows the residual stream and the MLP's output (model/hooks.py).
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = Site(), Site(), Site()
        self.hook_mlp_out = None if config.attn_only else Site()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))
        return x

    def forward_with_weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` through the readable path, which also returns the layer's attention pattern [B, H, T, T], past
        the block's sites."""
        x = self.hook_resid_pre(x)
        attended, pattern = self.attn.forward_with_weights(self.ln_1(x))
        x = self.hook_resid_mid(x + attended)
        if self.mlp is not None:
            x = x + self.hook_mlp_out(self.mlp(self.ln_2(x)))
        return self.hook_resid_post(x), pattern


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.vocab_size is None:
            raise ValueError("a GPT needs its config's vocab_size: GPTConfig(vocab_size=..., ...)")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        # "modern" encodes position by rotating queries and keys instead, relative_positions by a bias in attention.
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.absolute_positions else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = Norm(config.n_embd, config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix reads and writes tokens
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        # Projections that write into the residual stream: scaled down (GPT-2) so the stream's variance does not
        # grow with depth, or zero ("modern") so each block starts as the identity.
        for block in self.blocks:
            for proj in [block.attn.out_proj] + ([block.mlp.c_proj] if block.mlp is not None else []):
                if self.config.modern:
                    nn.init.zeros_(proj.weight)
                else:
                    nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def crop_block_size(self, block_size: int) -> None:
        """Runs with fewer positions than it has: the rows of the position table beyond them are dropped (as
        nanoGPT's `crop_block_size` does), or the distances of the relative position biases beyond them, for a
        model trained elsewhere with a longer block."""
        if not 0 < block_size <= self.config.block_size:
            raise ValueError(f"cannot crop {self.config.block_size} positions to {block_size}")
        self.config = dataclasses.replace(self.config, block_size=block_size)
        if self.wpe is not None:
            self.wpe = nn.Embedding.from_pretrained(self.wpe.weight[:block_size].detach().clone(), freeze=False)
        for attn in (block.attn for block in self.blocks if block.attn.position_bias is not None):
            attn.position_bias = nn.Parameter(attn.position_bias[:, :block_size].detach().clone())

    # --- training, evaluation, watching ------------------------------------------------

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, all_logits: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx [B, T] token ids -> (logits, loss). With targets, logits cover every position and loss is the mean
        cross-entropy; without, only the last position goes through the head (all a sampler needs) unless
        `all_logits` is set."""
        x = self._embed(idx)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
            return logits, loss
        return (self.lm_head(x) if all_logits else self.lm_head(x[:, -1:, :])), None

    def forward_with_attention(
        self, idx: torch.Tensor, *, logits_at: torch.Tensor | None = None, start_at_layer: int = 0
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The readable path through every layer: (logits at every position, one attention pattern [batch, head,
        query_pos, key_pos] per layer). With `logits_at` ([batch] positions), the logits [batch, vocab] at those
        positions only: the output head over every position is most of the work when a caller reads one row each.
        With `start_at_layer` (TransformerLens's), `idx` is the residual stream entering that block [batch, pos,
        d_model], and the blocks before it are not run (nor give a pattern)."""
        x = self._embed(idx) if start_at_layer == 0 else idx
        patterns = []
        for block in self.blocks[start_at_layer:]:
            x, pattern = block.forward_with_weights(x)
            patterns.append(pattern)
        if logits_at is not None:
            x = x[torch.arange(x.shape[0], device=x.device), logits_at]
        return self.lm_head(self.ln_f(x)), patterns

    def run_with_cache(
        self,
        idx: torch.Tensor,
        names: Iterable[str] = (),
        *,
        edits: Edits | None = None,
        logits_at: torch.Tensor | None = None,
        start_at_layer: int = 0,
    ) -> tuple[torch.Tensor, Cache]:
        """`forward_with_attention`'s logits, evaluating, with `edits` acting at their sites and the sites `names`
        recorded in the cache returned (TransformerLens's `run_with_hooks` and `run_with_cache` in one)."""
        with evaluating(self), attached(self, edits, names) as cache:
            logits, _ = self.forward_with_attention(idx, logits_at=logits_at, start_at_layer=start_at_layer)
        return logits, cache

    def _embed(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.config.block_size:
            raise ValueError(
                f"sequence of {T} tokens is longer than block_size="
                f"{self.config.block_size}; crop the input or train with a larger block_size"
            )
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        return self.drop(x)

    # Sampling (model/sampling.py): idx [B, T] -> [B, T + max_new_tokens], or each new token [B, 1] as soon as
    # it is sampled. Options: temperature (0 is greedy), top_k, top_p, generator, use_cache (default True),
    # edits (model/hooks.py: a removed head's output, say).
    generate = sampling.generate
    generate_stream = sampling.generate_stream


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """`model` run for evaluation inside: eval mode (no dropout) and no gradients; every submodule's own flag
    restored after, so it can run in the middle of training."""
    # Per-module flags, not one model-wide flag: a caller may have frozen part of the model in eval mode on purpose.
    # Only those that were training are touched: an analysis runs the model many times inside one pass, already in
    # eval mode, and setting every module's flag costs about a microsecond each time.
    training = [module for module in model.modules() if module.training]
    for module in training:
        module.training = False
    try:
        with torch.no_grad():
            yield model
    finally:
        for module in training:
            module.training = True
