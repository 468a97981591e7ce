"""Proof by ablation: remove heads and see what the model loses.

Two ways to remove a head:
- zero-ablation (the default): its output becomes zero. Nothing but the model is needed, so it
  works from any checkpoint; it is what the README's floors are measured with.
- mean-ablation: its output becomes its mean over the held-out text, so the layers after it
  still see an output of the usual size and direction; only what the head does differently from
  token to token is removed. It needs held-out text, and it keeps a head that writes a constant
  (an attention sink's) from looking important just because that constant went missing.

What each kind of head is tested on: induction heads and duplicate-token heads on the in-context
gain; previous-token heads on the induction score and the in-context gain (the two-head circuit:
the earlier head's output lets the later one find the token after); sink, current-token and
positional heads on the held-out text's loss; the best pronoun head on the continuation accuracy;
and, with agreement contexts, the most selective head and the heads that read the name on
agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from model.gpt import Ablation
from watch.capture import evaluating
from watch.heads import ablation_for, head_name
from watch.headtypes import TYPE_SETS, TYPES, HeadType, heads_of, type_scores
from watch.pipeline import Results, score
from watch.probesets import AGREEMENT, PRONOUN, REPEATED, TEXT, ProbeSet, ProbeSets
from watch.pronouns import most_selective, name_readers, probe_report

MODES = ("zero", "mean")
DEFAULT_MODE = "zero"


def head_means(model: nn.Module, text: ProbeSet) -> dict[int, torch.Tensor]:
    """Each layer's heads' mean output over `text`: {layer: [n_head, head_dim]}, read where the heads'
    outputs enter the output projection."""
    cfg = model.config
    sums = {layer: torch.zeros(cfg.n_head, cfg.head_dim, dtype=torch.float64) for layer in range(cfg.n_layer)}
    count = 0

    def record(layer: int):
        def hook(module: nn.Module, inputs: tuple) -> None:
            merged = inputs[0].detach().double().cpu()                       # [B, T, n_head * head_dim]
            sums[layer] += merged.reshape(-1, cfg.n_head, cfg.head_dim).sum(0)
        return hook

    handles = [block.attn.out_proj.register_forward_pre_hook(record(layer))
               for layer, block in enumerate(model.blocks)]
    device = next(model.parameters()).device
    try:
        with evaluating(model):
            for ids in text.ids:
                model(torch.tensor([ids], device=device))
                count += len(ids)
    finally:
        for handle in handles:
            handle.remove()
    return {layer: (total / count).float() for layer, total in sums.items()}


def plan(model: nn.Module, heads: Sequence[str], mode: str = DEFAULT_MODE,
         means: dict[int, torch.Tensor] | None = None) -> Ablation:
    """The ablation that removes `heads` ("L1H3", ...) the `mode` way (mean: `means` needed)."""
    if mode not in MODES:
        raise ValueError(f"ablation mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "mean" and means is None:
        raise ValueError("mean-ablation needs the heads' mean outputs (head_means of held-out text)")
    cfg = model.config
    return Ablation(ablation_for(heads, cfg.n_layer, cfg.n_head), means if mode == "mean" else None)


@dataclass
class AblationResult:
    """The model with `heads` removed (`label` says why these), and what one pass then found."""

    label: str
    heads: list[str]
    kind: str                   # what they were chosen as: a head type, "pronoun", "most_selective", "name_readers"
    mode: str
    results: Results


def ablated(model: nn.Module, sets: ProbeSets, heads: Sequence[str], label: str, kind: str,
            mode: str = DEFAULT_MODE, means: dict[int, torch.Tensor] | None = None,
            kinds: tuple[str, ...] = (PRONOUN, AGREEMENT, REPEATED, TEXT)) -> AblationResult:
    """One pass over `sets` (their `kinds` only) with `heads` removed."""
    results = score(model, sets, plan(model, heads, mode, means), kinds=kinds)
    return AblationResult(label, list(heads), kind, mode, results)


def proofs(model: nn.Module, sets: ProbeSets, results: Results, types: dict[str, HeadType],
           mode: str = DEFAULT_MODE) -> list[AblationResult]:
    """Every typed head removed alone; for each type a head has, the two heads with the highest
    score of that type together, typed or not (the pair a circuit is often split across), and all
    the heads of the type when there are more than two; and the best pronoun head."""
    means = head_means(model, sets.get(TEXT)) if mode == "mean" and sets.get(TEXT) is not None else None
    if mode == "mean" and means is None:
        raise ValueError("mean-ablation needs held-out text; use zero-ablation")
    out = []
    scores = type_scores(results)
    for kind in TYPES:
        heads = heads_of(types, kind)
        if not heads:
            continue
        groups = [([head], head) for head in heads]
        groups.append((top_heads(scores[kind], 2), "top two by score"))
        if len(heads) > 2:
            groups.append((heads, f"all {len(heads)}"))
        for group, label in groups:   # what they cost is read on the sets the types are measured on
            out.append(ablated(model, sets, group, label, kind, mode, means, kinds=TYPE_SETS))
    report = probe_report(results)
    if report is not None:
        out.append(ablated(model, sets, [report.best.name], report.best.name, "pronoun", mode, means))
    return out


def top_heads(scores: torch.Tensor, count: int) -> list[str]:
    """The `count` heads with the highest of these [layer, head] scores, highest first."""
    flat = torch.nan_to_num(scores, nan=float("-inf")).flatten()
    order = torch.argsort(flat, descending=True, stable=True)[:count]
    return [head_name(int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in order]


def agreement_ablations(model: nn.Module, sets: ProbeSets, results: Results) -> list[AblationResult]:
    """With agreement contexts: the most selective head on the pronoun probes removed, then the heads
    that read the name (zero-ablation)."""
    if AGREEMENT not in sets.sets:
        return []
    report = probe_report(results)
    choices = [("most_selective", [most_selective(report).name] if report else []),
               ("name_readers", name_readers(results.per_head("name_reading")))]
    return [ablated(model, sets, heads, ", ".join(heads), kind, kinds=(PRONOUN, AGREEMENT))
            for kind, heads in choices if heads]
