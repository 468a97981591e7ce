"""One capture: a probe set run through the model's readable path, keeping every layer's attention
pattern `[batch, head, query_pos, key_pos]` (each layer's `hook_pattern` site, model/hooks.py) and the next-token
logits the set asks for. Every
score in `watch/measure/scores.py` is a function of a capture; nothing else runs the model to watch it.
The pass (`watch.measure.reading.read`) reads every score from the captures, and keeps the watched sentences'
patterns (`sentence_patterns`) for the heatmaps and the attention page.

Sequences of a set share a forward, right-padded: attention is causal, so the padding after a
sequence is never a key for its own positions and nothing read from them changes. A set is one
forward unless its patterns would exceed `BATCH_WEIGHTS`; then it is split into as few forwards
as fit, never inside one of its groups (the pairs of held-out windows).

Captures run in eval mode (no dropout) without gradients and put the model's train/eval flags
back as they were, so they can run in the middle of training.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn as nn

from common.errors import UserError
from model.hooks import site_name
from watch.measure.heads import Ablation
from watch.measure.probesets import SENTENCES, ProbeSet

# Attention weights one forward may hold (every layer's [batch, head, T, T]): 128 MB of float32.
BATCH_WEIGHTS = 1 << 25


@dataclass
class Capture:
    """One forward over sequences `rows` of `probe_set`: `ids` [N, T] (right-padded with 0s),
    `lengths` [N], `patterns` one [N, head, T, T] float32 tensor per layer, and `logits`: [N, T, vocab]
    when the set reads every position, [N, vocab] at its `logits_at` (position 0's where that is None),
    or None."""

    probe_set: ProbeSet
    rows: range
    ids: torch.Tensor
    lengths: torch.Tensor
    patterns: list[torch.Tensor]
    logits: torch.Tensor | None
    _shared: dict = field(default_factory=dict, repr=False)

    @property
    def items(self) -> list:
        return self.probe_set.items[self.rows.start : self.rows.stop]

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """`make()`, computed once per capture however many scores ask for it (the next-token losses,
        the pronoun weights)."""
        if name not in self._shared:
            self._shared[name] = make()
        return self._shared[name]

    def constant(self, name: str, make: Callable[[], Any]) -> Any:
        """`make()`, made once for these sequences of the probe set, whatever the model (score
        targets, masks): `ProbeSet.constant`."""
        return constant(self.probe_set, name, self.rows, make)


def constant(probe_set: ProbeSet, name: str, rows: range, make: Callable[[], Any]) -> Any:
    """`make()` for the sequences `rows` of `probe_set`, made on first use and kept with the set."""
    key = (name, rows.start, rows.stop)
    if key not in probe_set.constants:
        probe_set.constants[key] = make()
    return probe_set.constants[key]


def _batch_size(model: nn.Module, probe_set: ProbeSet) -> int:
    """Sequences a forward takes: as many as keep the patterns (and the logits at every position, when the set
    reads them) within BATCH_WEIGHTS numbers, a whole number of the set's groups."""
    cfg = model.config
    width = max(len(ids) for ids in probe_set.ids)
    step = BATCH_WEIGHTS // (cfg.n_layer * cfg.n_head * width * width)
    if probe_set.all_logits:
        step = min(step, BATCH_WEIGHTS // (width * cfg.vocab_size))
    return max(probe_set.group, step // probe_set.group * probe_set.group)


def captures(model: nn.Module, probe_set: ProbeSet, ablate: Ablation | None = None) -> Iterator[Capture]:
    """The captures of `probe_set`: one forward each, normally one in all (see `BATCH_WEIGHTS`)."""
    if not len(probe_set):
        return
    block_size = model.config.block_size
    for i, ids in enumerate(probe_set.ids):  # the probe sets' makers crop or leave out longer ones
        if not 0 < len(ids) <= block_size:
            raise ValueError(f"{probe_set.kind} sequence {i} has {len(ids)} tokens; the model takes 1 to {block_size}")
    device = next(model.parameters()).device
    step = _batch_size(model, probe_set)
    chunks = [range(start, min(start + step, len(probe_set))) for start in range(0, len(probe_set), step)]
    # the padded inputs of each forward depend on the set alone: made at its first pass, kept for every later one
    inputs = [
        constant(probe_set, f"inputs on {device}", rows, partial(_inputs, probe_set, rows, device)) for rows in chunks
    ]
    names = [site_name("pattern", layer) for layer in range(model.config.n_layer)]
    edits = ablate.edits() if ablate is not None else None
    for rows, (idx, at, lengths) in zip(chunks, inputs, strict=True):
        logits, cache = model.run_with_cache(idx, names, edits=edits, logits_at=at)
        read = probe_set.all_logits or probe_set.logits_at is not None
        yield Capture(
            probe_set,
            rows,
            idx.cpu(),
            lengths,
            [cache[name].float().cpu() for name in names],
            logits.float().cpu() if read else None,
        )


def _inputs(
    probe_set: ProbeSet, rows: range, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(ids [N, T] right-padded with 0s, the positions whose logits are read [N] or None, lengths [N]) of `rows`."""
    chunk = probe_set.ids[rows.start : rows.stop]
    idx = torch.zeros(len(chunk), max(len(ids) for ids in chunk), dtype=torch.long)
    for row, ids in enumerate(chunk):
        idx[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    at = None
    if probe_set.logits_at is not None and not probe_set.all_logits:
        at = torch.tensor([pos or 0 for pos in probe_set.logits_at[rows.start : rows.stop]], device=device)
    return idx.to(device), at, torch.tensor([len(ids) for ids in chunk])


def capture_from_patterns(
    probe_set: ProbeSet, patterns: Sequence[Sequence[torch.Tensor]], logits: Sequence[torch.Tensor] | None = None
) -> Capture:
    """A capture made from patterns found elsewhere (by hand in a test, or another library's cache):
    `patterns[sequence][layer]` [head, length, length] for each of the set's sequences, and the
    logits it reads, one per sequence ([vocab] at its `logits_at`, or [length, vocab])."""
    n = len(probe_set)
    if len(patterns) != n:
        raise ValueError(f"{len(patterns)} sequences of patterns for a probe set of {n}")
    idx, _, lengths = _inputs(probe_set, range(n), torch.device("cpu"))
    width = idx.shape[1]
    n_layer, n_head = len(patterns[0]), patterns[0][0].shape[0]
    stacked = [torch.zeros(n, n_head, width, width) for _ in range(n_layer)]
    for row, (ids, layers) in enumerate(zip(probe_set.ids, patterns, strict=True)):
        length = len(ids)
        for layer, pattern in enumerate(layers):
            if tuple(pattern.shape) != (n_head, length, length):
                raise ValueError(
                    f"sequence {row}, layer {layer}: pattern of shape {tuple(pattern.shape)}, expected "
                    f"{(n_head, length, length)}"
                )
            stacked[layer][row, :, :length, :length] = pattern.float()
    read = None
    if logits is not None:
        if probe_set.all_logits:
            read = torch.zeros(n, width, logits[0].shape[-1])
            for row, values in enumerate(logits):
                read[row, : values.shape[0]] = values.float()
        else:
            read = torch.stack([values.float() for values in logits])
    return Capture(probe_set, range(n), idx, lengths, stacked, read)


def capture_attention(
    model: nn.Module, ids_list: Sequence[Sequence[int]], ablate: Ablation | None = None, *, crop: bool = False
) -> list[list[torch.Tensor]]:
    """Every layer's pattern for each sentence: `patterns[sentence][layer]`, a float32 CPU tensor
    [head, query_pos, key_pos]. A sentence longer than block_size raises `UserError`, or with
    `crop=True` keeps its first block_size tokens."""
    block_size = model.config.block_size
    checked = []
    for index, ids in enumerate(ids_list):
        ids = list(ids)
        if not ids:
            raise UserError(f"sentence {index} has no tokens; attention needs at least one")
        if len(ids) > block_size and not crop:
            raise UserError(
                f"sentence {index} has {len(ids)} tokens but the model's block_size is {block_size}; "
                f"shorten it to at most {block_size} tokens"
            )
        checked.append(ids[:block_size])
    return sentence_patterns(captures(model, ProbeSet(SENTENCES, checked), ablate))


def sentence_patterns(captured: Iterable[Capture]) -> list[list[torch.Tensor]]:
    """`patterns[sentence][layer]` [head, length, length], each cut to its own sentence."""
    out = []
    for capture in captured:
        for row, n in enumerate(capture.lengths.tolist()):
            out.append([p[row, :, :n, :n].clone() for p in capture.patterns])
    return out
