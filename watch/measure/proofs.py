"""Proof by ablation: remove heads (an `Ablation`, watch/measure/heads.py) and see what the model loses, an
`AblationResult` read on what each kind of head is tested on (its type's `tested_on`).

Two ways to remove a head:
- zero-ablation (the default): its output becomes zero. Nothing but the model is needed, so it works from any
  checkpoint; the README's floors are measured with it.
- mean-ablation: its output becomes its mean over the held-out text, so the layers after it still see an output
  of the usual size and direction, and only what the head does differently from token to token is removed. It needs
  held-out text, and it keeps a head that writes a constant (an attention sink's) from looking important just
  because that constant went missing.

What each kind is tested on follows from what it is for: induction, duplicate-token and previous-token heads on the
in-context gain (previous-token heads too, because of the two-head circuit: the earlier head's output lets the later
one find the token after); sink, current-token and positional heads on the held-out loss; the best pronoun head on
the continuation accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from model.hooks import site_name
from watch.measure.capture import capture_attention
from watch.measure.heads import Ablation, ablation_for, head_name
from watch.measure.headtypes import TYPE_SETS, TYPES
from watch.measure.probesets import AGREEMENT, PRONOUN, REPEATED, TEXT, ProbeSet, ProbeSets
from watch.measure.reading import Reading, read_pass


def head_means(model: nn.Module, text: ProbeSet) -> dict[int, torch.Tensor]:
    """Each layer's heads' mean output over `text`: {layer: [n_head, head_dim]}, read at each layer's `hook_z`."""
    names = [site_name("z", layer) for layer in range(model.config.n_layer)]
    sums = [torch.zeros(model.config.n_head, model.config.head_dim, dtype=torch.float64) for _ in names]
    device, count = next(model.parameters()).device, 0
    for ids in text.ids:
        _, cache = model.run_with_cache(torch.tensor([ids], device=device), names)
        for total, name in zip(sums, names, strict=True):
            total += cache[name][0].double().sum(0).cpu()  # [T, H, head_dim] summed over positions
        count += len(ids)
    return {layer: (total / count).float() for layer, total in enumerate(sums)}


@dataclass(frozen=True)
class AblationResult:
    """What removing heads cost: `heads` (as chosen, in that order; `label` says which) removed the
    `ablation` way, chosen as `kind` (a head type, "pronoun", "most_selective", "name_readers"), and
    the reading of one pass without them."""

    heads: list[str]
    label: str
    kind: str
    ablation: Ablation
    reading: Reading
    looks: str = ""  # where the head looks, in words ("copying" heads: on the repeated tokens)

    @property
    def tested_on(self) -> tuple[str, bool] | None:
        """(the model's number that removing these heads is measured on, whether higher is better): their type's
        (`watch.measure.headtypes.HeadType.tested_on`), the in-context gain for the heads that carry the copying
        (`copying_route`); None for those removed for agreement (`agreement_ablations`)."""
        head_type = TYPES.get("induction" if self.kind == "copying" else self.kind)  # copying: as induction heads do
        return (head_type.tested_on, head_type.higher_is_better) if head_type is not None else None

    @property
    def best_top1_left(self) -> float | None:
        """The best top-1 on the pronoun probes among the heads left in place (None without the probes)."""
        left = [top1 for name, top1 in self.reading.results.per_head("top1").items() if name not in self.heads]
        return max(left) if left else None


def ablated(
    model: nn.Module,
    sets: ProbeSets,
    heads: Sequence[str],
    label: str,
    kind: str,
    means: dict[int, torch.Tensor] | None = None,
    kinds: tuple[str, ...] = (PRONOUN, AGREEMENT, REPEATED, TEXT),
    looks: str = "",
) -> AblationResult:
    """One pass over `sets` (their `kinds` only) with `heads` removed: zero-ablation, or mean-ablation with `means`."""
    ablation = ablation_for(heads, means=means)
    reading = read_pass(model, sets, ablate=ablation, kinds=kinds)
    return AblationResult(list(heads), label, kind, ablation, reading, looks)


def proofs(model: nn.Module, sets: ProbeSets, reading: Reading, mode: str = "zero") -> list[AblationResult]:
    """Every typed head removed alone; for each type a head has, the two heads with the highest
    score of that type together, typed or not (the pair a circuit is often split across), and all
    the heads of the type when there are more than two; and the best pronoun head, also when it has
    no type (then labelled "best")."""
    means = head_means(model, sets.get(TEXT)) if mode == "mean" and sets.get(TEXT) is not None else None
    if mode == "mean" and means is None:
        raise ValueError("mean-ablation needs held-out text; use zero-ablation")
    out = []
    for kind in TYPES:
        heads = [t.name for t in reading.typed.get(kind, [])]
        if not heads:
            continue
        groups = [([head], head) for head in heads]
        groups.append((top_heads(reading.type_scores[kind], 2), "top two by score"))
        if len(heads) > 2:
            groups.append((heads, f"all {len(heads)}"))
        for group, label in groups:  # what they cost is read on the sets the types are measured on
            out.append(ablated(model, sets, group, label, kind, means, kinds=TYPE_SETS))
    if reading.pronouns is not None and best_pronoun_proof(reading, out) is None:  # the best head, typed or not
        out.append(ablated(model, sets, [reading.pronouns.best.name], "best", "pronoun", means))
    return out + copying_route(model, sets, reading, means)


ROUTE_GAIN = 0.5  # nats/token: an in-context gain worth explaining
ROUTE_MAX_HEADS = 16  # beyond this many heads, removing each in turn costs more than a report should


def copying_route(model: nn.Module, sets: ProbeSets, reading: Reading, means: dict | None) -> list[AblationResult]:
    """When the second copy of repeated tokens is predicted better than the first and no head is an induction
    head: every head removed in turn (kind "copying"), each with where it looks on the repeats."""
    numbers, repeated = reading.results.numbers, sets.get(REPEATED)
    gain, spread = numbers.get("in_context_gain"), numbers.get("in_context_gain_spread") or 0.0
    cfg = model.config
    if (
        repeated is None
        or reading.typed.get("induction")
        or gain is None
        or gain < max(ROUTE_GAIN, spread)
        or cfg.n_layer * cfg.n_head > ROUTE_MAX_HEADS
    ):
        return []
    patterns = capture_attention(model, repeated.ids)  # [sequence][layer] [head, T, T]
    out = []
    for layer in range(cfg.n_layer):
        for head in range(cfg.n_head):
            name = head_name(layer, head)
            looks = where_it_looks(torch.stack([layers[layer][head] for layers in patterns]))
            out.append(ablated(model, sets, [name], name, "copying", means, kinds=(REPEATED,), looks=looks))
    return out


def where_it_looks(pattern: torch.Tensor) -> str:
    """Where a head looks from the second copy of repeated tokens (pattern [N, T, T], T = 2L), in words: the
    distance back that takes most of its attention, said against the L - 1 an induction head looks back."""
    length = pattern.shape[-1] // 2
    rows = pattern[:, length:].double()  # queries in the second copy
    query = torch.arange(length, 2 * length)[:, None]
    distance = (query - torch.arange(2 * length)[None, :]).clamp(min=0)
    by_distance = torch.zeros(2 * length, dtype=torch.float64)
    by_distance.index_add_(0, distance.flatten(), rows.mean(0).flatten())
    by_distance /= length
    share, back = float(by_distance.max()), int(by_distance.argmax())
    first = float(rows[..., 0].mean())
    if first > share:
        return f"at the first token ({first:.2f} of its attention)"
    if back == length - 1:
        return f"at the token after the earlier copy, as an induction head does, but weakly ({share:.2f})"
    if back == length:
        return f"at the earlier copy of the same token ({share:.2f} of its attention)"
    if back == 0:
        return f"at the token itself ({share:.2f} of its attention)"
    past = length - 1 - back
    if 0 < past <= 4:  # into the earlier copy, a few tokens past where an induction head looks
        return (
            f"into the earlier copy, {past} token{'s' if past > 1 else ''} after the one an induction head looks "
            f"at ({share:.2f} of its attention)"
        )
    return f"a fixed {back} token{'s' if back > 1 else ''} back ({share:.2f} of its attention)"


def best_pronoun_proof(reading: Reading, found: Sequence[AblationResult]) -> AblationResult | None:
    """Among `found`, the best pronoun head removed alone (None when it is not there)."""
    if reading.pronouns is None:
        return None
    best = reading.pronouns.best.name
    return next((p for p in found if p.kind == "pronoun" and p.heads == [best]), None)


def top_heads(scores: torch.Tensor, count: int) -> list[str]:
    """The `count` heads with the highest of these [layer, head] scores, highest first."""
    flat = torch.nan_to_num(scores, nan=float("-inf")).flatten()
    order = torch.argsort(flat, descending=True, stable=True)[:count]
    return [head_name(int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in order]


def agreement_ablations(model: nn.Module, sets: ProbeSets, reading: Reading) -> list[AblationResult]:
    """With agreement contexts: the most selective head on the pronoun probes removed, then the heads
    that read the name (zero-ablation)."""
    if AGREEMENT not in sets.sets:
        return []
    choices = [
        ("most_selective", [reading.pronouns.most_selective.name] if reading.pronouns else []),
        ("name_readers", reading.name_readers),
    ]
    return [
        ablated(model, sets, heads, ", ".join(heads), kind, kinds=(PRONOUN, AGREEMENT))
        for kind, heads in choices
        if heads
    ]
