"""What a pass means, read once. A pass (`watch/measure/pipeline.py`) gives a number per head and score; its
`Reading` adds what those numbers say: the pronoun head table, pronoun agreement and the heads that
read the name, every head's type scores and, against the untrained model, its type; how the heads
compose, from the weights; and the baselines it was read against (the untrained model, and for a
fine-tune the model before fine-tuning). The terminal report, TensorBoard, the attention page,
`sample.py` and the proofs by ablation all read the same `Reading`, so none of them derives it again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from model.ablation import Ablation
from watch.measure.composition import Composition, composition
from watch.measure.headtypes import TYPES, HeadType, head_types, heads_of, type_scores
from watch.measure.pipeline import Results, score
from watch.measure.probesets import ProbeSets
from watch.measure.pronouns import AgreementStats, ProbeReport, agreement_stats, name_readers, probe_report


@dataclass(frozen=True)
class Reading:
    """One pass's `results` and what they say (None, or empty, where the pass had no set to say it)."""

    results: Results
    pronouns: ProbeReport | None  # the pronoun probes' head table
    agreement: AgreementStats | None  # the single-person contexts
    name_readers: list[str]  # the heads that read the name before a pronoun
    type_scores: dict[str, torch.Tensor]  # {type: [layer, head]}
    offsets: torch.Tensor | None  # each head's best positional offset [layer, head]
    types: dict[str, HeadType]  # each head's type, against `untrained`
    typed: dict[str, list[HeadType]]  # {type: its heads, highest score first}
    composition: Composition | None  # how the heads compose (None: not read, or a one-layer model)
    reach: dict[str, dict[int, float]]  # each head's induction score by distance to the earlier copy
    untrained: Reading | None  # the untrained model's reading, if the types were measured against it
    before: Reading | None = None  # a fine-tune's model before fine-tuning, read against the same untrained


def read_pass(
    model: nn.Module,
    sets: ProbeSets,
    *,
    untrained: Reading | None = None,
    before: Reading | None = None,
    ablate: Ablation | None = None,
    kinds: tuple[str, ...] | None = None,
    compose: bool = False,
    is_untrained: bool = False,
) -> Reading:
    """One pass over `sets` (only `kinds`, if given; `ablate`'s heads removed), read against the baselines given, or
    with `is_untrained` (`model` is the untrained model itself) against itself. `compose` also reads how the heads
    compose, from the weights: what the watch and `sample.py` show. Removing heads leaves the weights as they are,
    and for GPT-2 it takes seconds, so the proofs do without it."""
    found = composition(model) if compose else None
    return read_results(score(model, sets, ablate, kinds), untrained, found, before, is_untrained=is_untrained)


def read_results(
    results: Results,
    untrained: Reading | None = None,
    composition: Composition | None = None,
    before: Reading | None = None,
    *,
    is_untrained: bool = False,
) -> Reading:
    """The reading of a pass's results, also of one read from captures made elsewhere; head types are
    measured against `untrained`'s type scores (against its own with `is_untrained`), or by the score alone."""
    scores, offsets = type_scores(results)
    baseline = scores if is_untrained else untrained.type_scores if untrained is not None else {}
    types = head_types(scores, baseline)
    typed = {kind: heads_of(types, kind) for kind in TYPES}
    pronouns, agreement = probe_report(results), agreement_stats(results)
    readers = name_readers(results.per_head("name_reading"))
    reading = Reading(
        results,
        pronouns,
        agreement,
        readers,
        scores,
        offsets,
        types,
        typed,
        composition,
        results.reach(),
        untrained,
        before,
    )
    return replace(reading, untrained=reading) if is_untrained else reading
