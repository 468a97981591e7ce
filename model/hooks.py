"""Named sites: where an analysis reads the model's activations, and puts others in their place.

The readable path (`GPT.forward_with_attention`) passes what an analysis reads through a `Site`, named as
TransformerLens names its hook points, so a name means the same in both (shapes for a batch; an unbatched input
drops the first axis):

    blocks.{l}.hook_resid_pre       [batch, pos, d_model]             the residual stream entering block l
    blocks.{l}.attn.hook_q, _k, _v  [batch, pos, head, d_head]        queries, keys, values (before QK-norm, rotary)
    blocks.{l}.attn.hook_pattern    [batch, head, query_pos, key_pos] the attention weights
    blocks.{l}.attn.hook_z          [batch, pos, head, d_head]        each head's output, before the output projection
    blocks.{l}.hook_resid_mid       [batch, pos, d_model]             after the attention (what the MLP reads)
    blocks.{l}.hook_mlp_out         [batch, pos, d_model]             what the MLP adds (no MLP: no site)
    blocks.{l}.hook_resid_post      [batch, pos, d_model]             leaving block l; the last, the final norm's input

A site does nothing until something is attached to it (`attached`): an `Edit`, a function of what the site receives
that gives what goes on in its place (a removed head's output, another run's activation), and a `Cache` that keeps
what goes on. One edit per site; `where` makes the common one, another run's values put in row by row, position by
position, head by head. `GPT.run_with_cache` runs the readable path with both. The fast path (`GPT.forward`, training
and evaluation) passes through no site; sampling applies edits of `hook_z` in its own step (`model/sampling.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

Edit = Callable[[torch.Tensor], torch.Tensor]  # what a site receives -> what goes on in its place
Edits = dict[str, Edit]  # by site name
HEAD_SITES = ("q", "k", "v", "pattern", "z")  # the sites inside the attention (`blocks.{l}.attn.hook_{kind}`)


class Site(nn.Module):
    """A named point of the readable path: passes its input on, or what an attached edit makes of it, and keeps what
    it passes on in an attached cache."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""
        self.edit: Edit | None = None
        self.cache: Cache | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.edit is not None:
            x = self.edit(x)
        if self.cache is not None:
            self.cache[self.name] = x
        return x


def site_name(kind: str, layer: int) -> str:
    """("z", 1) -> "blocks.1.attn.hook_z"; ("resid_pre", 0) -> "blocks.0.hook_resid_pre"."""
    return f"blocks.{layer}.attn.hook_{kind}" if kind in HEAD_SITES else f"blocks.{layer}.hook_{kind}"


class Cache(dict):
    """What a run recorded, by site name; `cache["z", 1]` is `cache["blocks.1.attn.hook_z"]`, as in TransformerLens."""

    def __getitem__(self, key: str | tuple[str, int]) -> torch.Tensor:
        return super().__getitem__(site_name(*key) if isinstance(key, tuple) else key)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(site_name(*key) if isinstance(key, tuple) else key)


def sites(model: nn.Module) -> dict[str, Site]:
    """Every site of `model`, by name."""
    return {name: module for name, module in model.named_modules() if isinstance(module, Site)}


@contextmanager
def attached(model: nn.Module, edits: Edits | None = None, record: Iterable[str] = ()) -> Iterator[Cache]:
    """Inside, `edits` act at their sites and the sites named in `record` keep what they pass on, in the cache
    yielded; every site is bare again after. An unknown name is a ValueError that lists the model's sites."""
    edits, record = edits or {}, set(record)
    found = sites(model)
    unknown = sorted(str(name) for name in (set(edits) | record) - set(found))
    if unknown:
        raise ValueError(f"no site {', '.join(unknown)} in this model; its sites: {', '.join(found)}")
    cache, used = Cache(), set(edits) | record  # every other site stays bare, as it is outside
    for name in used:
        found[name].name, found[name].edit, found[name].cache = name, edits.get(name), cache if name in record else None
    try:
        yield cache
    finally:
        for name in used:
            found[name].edit = found[name].cache = None


def where(mask: torch.Tensor, values: torch.Tensor) -> Edit:
    """The edit that puts `values` in where `mask` is True and keeps the rest: both broadcast to the activation (a mask
    [batch, pos, head, 1] picks rows, positions and heads of `hook_z`)."""
    return lambda x: torch.where(mask, values.to(x.dtype), x)


def removed_heads(heads: Iterable[int], means: torch.Tensor | None = None) -> Edit:
    """The edit of a layer's `hook_z` [..., head, d_head] that removes `heads`: their output becomes zeros
    (zero-ablation) or, with `means` [head, d_head], each one's mean output over some text (mean-ablation)."""
    heads, made = list(heads), {}  # the mask and the fill, made once for each kind of z: sampling edits every token

    def edit(z: torch.Tensor) -> torch.Tensor:
        n_head, kind = z.shape[-2], (z.shape[-2], z.device, z.dtype)
        if kind not in made:
            if any(not 0 <= head < n_head for head in heads):
                raise ValueError(f"cannot remove head {max(heads)}: the layer has heads 0 to {n_head - 1}")
            gone = torch.zeros(n_head, 1, dtype=torch.bool, device=z.device)
            gone[heads] = True
            made[kind] = gone, torch.zeros((), dtype=z.dtype, device=z.device) if means is None else means.to(z)
        return torch.where(*made[kind], z)

    return edit
