"""Running the model to watch it: attention patterns from the readable path,
next-token logits at probe positions from the fast path.

Both run in eval mode (no dropout) without gradients and put the model's
train/eval flags back as they were, so they can be called in the middle of
training.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from errors import UserError
from model.gpt import Ablation

if TYPE_CHECKING:
    from data.probes import AlignedProbe


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode and no gradients inside; every submodule's own flag restored after."""
    # Per-module flags, not one model-wide flag: a caller may have frozen part of
    # the model in eval mode on purpose.
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        for module, training in modes:
            module.training = training


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _checked(ids: Sequence[int], index: int, block_size: int, crop: bool) -> list[int]:
    ids = list(ids)
    if not ids:
        raise UserError(f"sentence {index} has no tokens; attention needs at least one")
    if len(ids) > block_size:
        if not crop:
            raise UserError(f"sentence {index} has {len(ids)} tokens but the model's block_size is {block_size}; "
                            f"shorten it to at most {block_size} tokens")
        ids = ids[:block_size]
    return ids


def capture_attention(model: nn.Module, ids_list: Sequence[Sequence[int]], ablate: Ablation | None = None,
                      *, crop: bool = False, batch_size: int = 64) -> list[list[torch.Tensor]]:
    """Attention patterns of every layer for each sentence, via the readable path.

    Returns `patterns[sentence][layer]`, a float32 CPU tensor [head, query_pos, key_pos].
    Sentences of similar length share a batch, right-padded: attention is causal, so the
    padding after a sentence is never a key for its own positions, and its rows and
    columns are cut off again. A sentence longer than block_size raises `UserError`, or
    with `crop=True` keeps its first block_size tokens.
    """
    block_size = model.config.block_size
    checked = [_checked(ids, i, block_size, crop) for i, ids in enumerate(ids_list)]
    device = _device(model)
    captured: list[list[torch.Tensor]] = [[] for _ in checked]
    order = sorted(range(len(checked)), key=lambda i: len(checked[i]))
    with evaluating(model):
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            width = max(len(checked[i]) for i in chunk)
            idx = torch.zeros(len(chunk), width, dtype=torch.long, device=device)
            for row, i in enumerate(chunk):
                idx[row, :len(checked[i])] = torch.tensor(checked[i], dtype=torch.long)
            _, patterns = model.forward_with_attention(idx, ablate=ablate)
            patterns = [p.detach().float().cpu() for p in patterns]
            for row, i in enumerate(chunk):
                n = len(checked[i])
                captured[i] = [p[row, :, :n, :n].clone() for p in patterns]
    return captured


def continuation_logits(model: nn.Module, aligned: Sequence[AlignedProbe], ablate: Ablation | None = None,
                        *, batch_size: int = 16) -> list[torch.Tensor | None]:
    """Next-token logits [vocab] at each probe's `continuation_pos`, from the fast path.

    None for probes without a continuation position. Each probe is cut just
    after its continuation position; probes are right-padded into batches,
    which leaves the positions read unchanged because attention is causal.
    """
    block_size = model.config.block_size
    wanted = []  # (probe index, ids up to and including continuation_pos)
    for i, item in enumerate(aligned):
        pos = item.continuation_pos
        if pos is None:
            continue
        if not 0 <= pos < len(item.ids):
            raise ValueError(f"probe {i} ({item.probe.text!r}): continuation_pos {pos} is outside its "
                             f"{len(item.ids)} tokens")
        if pos >= block_size:
            raise UserError(f"probe {i} ({item.probe.text!r}) needs {pos + 1} tokens of context but the "
                            f"model's block_size is {block_size}; shorten the probe")
        wanted.append((i, list(item.ids[:pos + 1])))

    result: list[torch.Tensor | None] = [None] * len(aligned)
    device = _device(model)
    # Similar lengths share a batch, so little work is spent on padding.
    wanted.sort(key=lambda pair: len(pair[1]))
    with evaluating(model):
        for start in range(0, len(wanted), batch_size):
            chunk = wanted[start:start + batch_size]
            width = max(len(ids) for _, ids in chunk)
            idx = torch.zeros(len(chunk), width, dtype=torch.long, device=device)
            for row, (_, ids) in enumerate(chunk):
                idx[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            logits, _ = model(idx, ablate=ablate, all_logits=True)
            for row, (i, ids) in enumerate(chunk):
                result[i] = logits[row, len(ids) - 1].float().cpu()
    return result
