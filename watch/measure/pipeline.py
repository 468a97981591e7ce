"""One pass of watching: every probe set captured once (`watch/measure/capture.py`), every registered score
(`watch/measure/scores.py`) read from those captures, into one `Results`; what they say is read once from
there (`watch/measure/reading.py`) for every reader."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from model.ablation import Ablation
from watch.measure.capture import Capture, captures, sentence_patterns
from watch.measure.heads import ablation_names, head_name
from watch.measure.probesets import REACH, REPEATED, SENTENCES, ProbeSets
from watch.measure.scores import HEAD_SCORES, MODEL_SCORES, derived_model_scores


@dataclass
class Results:
    """What one pass found. `heads[score]` is [layer, head] (float64; NaN where the score had nothing
    to average), `numbers[score]` a number per model score, `counts[score]` how many positions,
    probes or contexts it averaged, `patterns[sentence][layer]` the watched sentences' patterns."""

    heads: dict[str, torch.Tensor]
    numbers: dict[str, float]
    counts: dict[str, int]
    patterns: list[list[torch.Tensor]]
    sets: ProbeSets
    forwards: int
    ablated: list[str] = field(default_factory=list)

    def head(self, score: str, layer: int, head: int) -> float | None:
        """One head's score, None when it was not measured."""
        values = self.heads.get(score)
        if values is None or torch.isnan(values[layer, head]):
            return None
        return float(values[layer, head])

    def per_head(self, score: str) -> dict[str, float]:
        """{"L0H0": value, ...} for one score (empty when it was not measured)."""
        values = self.heads.get(score)
        if values is None:
            return {}
        return {
            head_name(layer, head): float(values[layer, head])
            for layer in range(values.shape[0])
            for head in range(values.shape[1])
            if not torch.isnan(values[layer, head])
        }

    def reach(self) -> dict[str, dict[int, float]]:
        """{"L1H0": {distance: score}}: each head's induction score where the earlier copy is that many tokens back,
        at each distance measured (the `REACH` set's, then the `REPEATED` set's L: the plain induction score)."""
        reach, repeated = self.sets.get(REACH), self.sets.get(REPEATED)
        measured = [(d, f"induction_{d}") for _, d in (reach.items[0] if reach is not None else ())]
        measured += [(len(repeated.ids[0]) // 2, "induction")] if repeated is not None else []
        found: dict[str, dict[int, float]] = {}
        for d, name in measured:
            for head, value in self.per_head(name).items():
                found.setdefault(head, {})[d] = value
        return found

    def best(self, score: str) -> tuple[str, float] | None:
        """The head with the highest score (earliest first on ties), and the score."""
        scores = self.per_head(score)
        if not scores:
            return None
        name = max(scores, key=scores.get)  # the first of equal highest: max keeps the earliest
        return name, scores[name]


def untrained_like(model: nn.Module, seed: int) -> nn.Module:
    """The model of the same config as `model` as training started it: initialised from `seed`
    (what `Trainer.from_config` seeds before building the model), on the same device. The global random
    state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(model)(model.config)
    return fresh.to(next(model.parameters()).device).eval()


def score(
    model: nn.Module, sets: ProbeSets, ablate: Ablation | None = None, kinds: tuple[str, ...] | None = None
) -> Results:
    """Captures each probe set of `sets` (only `kinds`, if given) once and reads every score
    registered for it; `ablate` removes heads for the whole pass."""
    chosen = [s for kind, s in sets.sets.items() if kinds is None or kind in kinds]
    results = read((capture for probe_set in chosen for capture in captures(model, probe_set, ablate)), sets)
    results.ablated = ablation_names(ablate)
    return results


def read(captured: Iterable[Capture], sets: ProbeSets) -> Results:
    """Every score registered for each capture's probe set, added up over the captures: the
    `Results` of a pass. Captures made by hand (`capture_from_patterns`) are read the same way."""
    totals: dict[str, tuple] = {}
    patterns: list[list[torch.Tensor]] = []
    forwards = 0
    for capture in captured:
        forwards += 1
        kind = capture.probe_set.kind
        for name, s in (*HEAD_SCORES.items(), *MODEL_SCORES.items()):
            if s.probe_set == kind:
                total, count = s.measure(capture)
                before = totals.get(name)
                totals[name] = (total, count) if before is None else (before[0] + total, before[1] + count)
        if kind == SENTENCES:
            patterns += sentence_patterns([capture])
    heads, numbers, counts = {}, {}, {}
    for name, (total, count) in totals.items():  # a score with nothing to average: NaN per head, no number
        counts[name] = int(count)
        if name in HEAD_SCORES:
            heads[name] = total / count if count else torch.full_like(total, float("nan"))
        elif count:
            numbers[name] = float(total) / count
    numbers.update(derived_model_scores(numbers, counts))
    return Results(heads, numbers, counts, patterns, sets, forwards)
