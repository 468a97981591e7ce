"""Removing heads: which heads of a GPT are removed, and what takes the place of each one's output.

Zero-ablation replaces a removed head's output by zeros. Mean-ablation replaces it by the head's
mean output over some text, so the layers after it still see an output of the usual size and
direction and only what the head does differently from token to token is removed. `GPT.forward`,
`GPT.forward_with_attention` and `GPT.generate` take an `Ablation` as `ablate=`; each attention
layer applies its own part of it before the heads are mixed (`GPT.head_ablations`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
