"""Removing heads: which heads of a GPT are removed, and what takes the place of each one's output.

Zero-ablation replaces a removed head's output by zeros. Mean-ablation replaces it by the head's
mean output over some text, so the layers after it still see an output of the usual size and
direction and only what the head does differently from token to token is removed. `GPT.forward`,
`GPT.forward_with_attention` and `GPT.generate` take an `Ablation` as `ablate=`; each attention
layer applies its own part of it before the heads are mixed (`GPT.head_ablations`).

Activation patching replaces a part of one run by the same part of another: a `Patch` puts the clean run's
heads' outputs, attention patterns or residual stream into the corrupted run (watch/measure/patching.py). It is
given to `GPT.forward_with_attention` as `patch=`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model.attention import HeadPatch


@dataclass(frozen=True)
class Ablation:
    """The heads to remove, as (layer, head) pairs counted from zero (kept sorted, each once), and
    what replaces them: zeros when `means` is None, else `means` {layer: [n_head, head_dim]}, each
    head's mean output over some text."""

    heads: tuple[tuple[int, int], ...]  # any iterable of pairs is taken, and kept as this
    means: dict[int, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(sorted({(int(layer), int(head)) for layer, head in self.heads})))

    @property
    def mode(self) -> str:
        """ "zero" or "mean": what replaces a removed head's output."""
        return "zero" if self.means is None else "mean"

    def by_layer(self) -> dict[int, list[int]]:
        """{layer: [head, ...]}, layers and heads in order."""
        out: dict[int, list[int]] = {}
        for layer, head in self.heads:
            out.setdefault(layer, []).append(head)
        return out


@dataclass(frozen=True)
class Patch:
    """Parts of another run put in place of this run's, batch row by batch row: `heads[layer]`, the heads' outputs or
    patterns a layer takes from it (a `HeadPatch`), and `residual[layer]`, (where [B, T] bool, values [B, T, d]):
    the residual stream entering the layer, replaced where `where` is True."""

    heads: dict[int, HeadPatch] = field(default_factory=dict)
    residual: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def entering(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The residual stream x [B, T, d] entering `layer`, patched where this patch says."""
        if layer not in self.residual:
            return x
        where, values = self.residual[layer]
        return torch.where(where.unsqueeze(-1), values.to(x.dtype), x)
