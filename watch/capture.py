"""Running the model to watch it: attention patterns from the readable path (whole
patterns of a few sentences, or one query row each of many probes in batches, with the
next-token logits there), and next-token logits at probe positions from the fast path.

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


def _right_padded(sequences: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """Token ids [len(sequences), longest], each row followed by zeros. Attention is causal, so the
    padding after a sequence is never a key for its own positions: nothing read from them changes."""
    idx = torch.zeros(len(sequences), max(len(ids) for ids in sequences), dtype=torch.long, device=device)
    for row, ids in enumerate(sequences):
        idx[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return idx


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
            idx = _right_padded([checked[i] for i in chunk], device)
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
            logits, _ = model(_right_padded([ids for _, ids in chunk], device), ablate=ablate, all_logits=True)
            for row, (i, ids) in enumerate(chunk):
                result[i] = logits[row, len(ids) - 1].float().cpu()
    return result


# Attention weights one batched forward may hold (every layer's [batch, head, T, T]): 128 MB of float32.
BATCH_WEIGHTS = 1 << 25


def capture_rows(model: nn.Module, ids_list: Sequence[Sequence[int]], query_pos: Sequence[int],
                 logits_pos: Sequence[int | None] | None = None, ablate: Ablation | None = None, *,
                 batch_size: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """One query row of every layer and head for each sentence, and next-token logits at one
    position of each, from the readable path: one forward per `batch_size` sentences (by default
    as many as keep the batch's attention weights within BATCH_WEIGHTS; all 256 of the demo's probes).

    Returns `(rows, logits)`: `rows` is a float32 CPU tensor [layer, sentence, head, key_pos],
    zero beyond each sentence's own length; `logits[i]` is [vocab] at `logits_pos[i]`, or None
    where that is None. Sentences are right-padded into a batch, which changes no row read:
    attention is causal, so no position sees the padding after it.
    """
    n = len(ids_list)
    if len(query_pos) != n or (logits_pos is not None and len(logits_pos) != n):
        raise ValueError(f"{n} sentences need as many query positions ({len(query_pos)}) and logits positions")
    checked = [_checked(ids, i, model.config.block_size, crop=False) for i, ids in enumerate(ids_list)]
    wanted = list(logits_pos) if logits_pos is not None else [None] * n
    for i, (ids, query, pos) in enumerate(zip(checked, query_pos, wanted, strict=True)):
        if not 0 <= query < len(ids) or (pos is not None and not 0 <= pos < len(ids)):
            raise ValueError(f"sentence {i}: query position {query} or logits position {pos} is outside "
                             f"its {len(ids)} tokens")
    width = max((len(ids) for ids in checked), default=0)
    cfg = model.config
    if batch_size is None:
        batch_size = max(1, BATCH_WEIGHTS // (cfg.n_layer * cfg.n_head * width * width or 1))
    rows = torch.zeros(cfg.n_layer, n, cfg.n_head, width)
    logits: list[torch.Tensor | None] = [None] * n
    device = _device(model)
    with evaluating(model):
        for start in range(0, n, batch_size):
            chunk = range(start, min(start + batch_size, n))
            idx = _right_padded([checked[i] for i in chunk], device)
            length = idx.shape[1]
            batch = torch.arange(len(chunk), device=device)
            queries = torch.tensor([query_pos[i] for i in chunk], device=device)
            at = torch.tensor([wanted[i] or 0 for i in chunk], device=device)  # position 0: read by nobody
            chunk_logits, patterns = model.forward_with_attention(idx, ablate=ablate, logits_at=at)
            for layer, pattern in enumerate(patterns):  # [batch, head, query_pos, key_pos]
                rows[layer, start:chunk.stop, :, :length] = pattern[batch, :, queries, :].float().cpu()
            for row, i in enumerate(chunk):
                if wanted[i] is not None:
                    logits[i] = chunk_logits[row].float().cpu()
    return rows, logits
