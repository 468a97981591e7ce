"""What kind of head each head became. Every head type is one record, a `HeadType`, in one registry, `TYPES`: its
name and words, the probe set and the scores it is measured by, and what removing its heads is tested on. The type
table and its legend, the JSON, the TensorBoard charts, the proofs by ablation, the HParams and the attention page's
legend all derive from the registry, so a new type is one record here.

A head has its strongest type where that is clearly learned (`RULE`; among the types a head passes, the highest
score wins). The ratio to the same head of the untrained model of the same config and seed keeps a head that looks
at the previous token only because every row of a young model is nearly uniform over a few positions from being
called a previous-token head. `broad` is reported beside the types, not as one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from watch.measure.heads import head_name
from watch.measure.probesets import PRONOUN, REPEATED, TEXT, ProbeSets
from watch.measure.scores import Measure, at_offset, induction_targets, on_targets_with_spread, same_token, sink


@dataclass(frozen=True)
class HeadType:
    """One kind of head. Its score is the share of a head's attention that goes where the type looks (0 to 1)."""

    name: str  # its key in the pass's scores, the JSON and TensorBoard's tags (heads/{name})
    label: str  # what the report's lines and the attention page call it
    column: str  # its column in the type table
    meaning: str  # what such a head does, in a learner's words: the legend of the type table and of the page
    probe_set: str  # the kind of probe set it is measured on (`watch.measure.probesets`)
    tested_on: str  # the model's number that removing its heads is measured on (`watch.measure.proofs`)
    higher_is_better: bool = True  # which way that number is better
    # The head scores measured for it on that set, by name (`watch.measure.scores`); none for a type `read` from its
    # set's own scores.
    measures: dict[str, Measure] = field(default_factory=dict)
    # Its score [layer, head] from the pass's head scores, for a type read from several (None: the score of its name).
    read: Callable[[dict[str, torch.Tensor]], torch.Tensor | None] | None = None
    hparam: bool = False  # its best head's score is an HParams metric, hparam/best_{name}
    # The type whose heads read what its heads write: removing them also says what the best of those is left with.
    feeds: str | None = None


POSITIONAL_OFFSETS = range(2, 9)  # the fixed offsets k a positional head may look back


def best_offset(heads: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Each head's weight at its best fixed offset k in 2..8, and that k (each [layer, head]); (None, None) without
    the held-out text the offsets are measured on."""
    scores = [heads.get(f"positional_{k}") for k in POSITIONAL_OFFSETS]
    if any(s is None for s in scores):
        return None, None
    values, index = torch.stack(scores).max(dim=0)  # over k: [k, layer, head] -> [layer, head]
    return values, torch.tensor(list(POSITIONAL_OFFSETS))[index]


TYPES: dict[str, HeadType] = {
    head_type.name: head_type
    for head_type in (
        HeadType(
            "previous_token",
            "previous-token",
            column="previous",
            meaning="looks at the token just before",
            probe_set=TEXT,
            measures={"previous_token": at_offset(1)},
            tested_on="in_context_gain",
            hparam=True,
            feeds="induction",  # the textbook circuit: an induction head's keys read a previous-token head
        ),
        HeadType(
            "duplicate_token",
            "duplicate-token",
            column="duplicate",
            meaning="looks back at earlier copies of the same token",
            probe_set=REPEATED,
            measures=on_targets_with_spread("duplicate_token", "same token", same_token),
            tested_on="in_context_gain",
            hparam=True,
        ),
        HeadType(
            "induction",
            "induction",
            column="induction",
            meaning="looks at the token that followed an earlier copy of the current one (copying)",
            probe_set=REPEATED,
            measures=on_targets_with_spread(
                "induction", "induction targets", lambda capture: induction_targets(capture.ids)
            ),
            tested_on="in_context_gain",
            hparam=True,
        ),
        HeadType(
            "sink",
            "first-token (sink)",
            column="first token",
            meaning="parks its attention on the first token (nothing else to do)",
            probe_set=TEXT,
            measures={"sink": sink},
            tested_on="text_loss",
            higher_is_better=False,
        ),
        HeadType(
            "current_token",
            "current-token",
            column="itself",
            meaning="looks at the token itself",
            probe_set=TEXT,
            measures={"current_token": at_offset(0)},
            tested_on="text_loss",
            higher_is_better=False,
        ),
        HeadType(
            "positional",
            "positional",
            column="k back",
            meaning="looks a fixed k tokens back",
            probe_set=TEXT,
            measures={f"positional_{k}": at_offset(k) for k in POSITIONAL_OFFSETS},
            tested_on="text_loss",
            higher_is_better=False,
            read=lambda heads: best_offset(heads)[0],
        ),
        HeadType(
            "pronoun",
            "pronoun",
            column="pronoun",
            meaning="looks from a pronoun at the noun it refers to",
            probe_set=PRONOUN,
            tested_on="continuation_accuracy",
            read=lambda heads: heads.get("referent"),  # its probe set's own referent weight
        ),
    )
}
TYPE_SETS = tuple(dict.fromkeys(head_type.probe_set for head_type in TYPES.values()))  # the sets types are read on


def types_not_measurable(sets: ProbeSets) -> str | None:
    """Why no head can be given a type with `sets` (a `ProbeSets`: none of the sets a type is read on could be
    made), in one line, for a report that leaves its head-type section out; None when some type can be read."""
    if any(sets.get(kind) is not None for kind in TYPE_SETS):
        return None
    reasons = dict.fromkeys(sets.missing[kind] for kind in TYPE_SETS if kind in sets.missing)
    return f"no head types: {'; '.join(reasons) or 'no held-out text to read them on'}"


# `broad`, how evenly a head spreads its attention, stands beside the types (the type table's last column, a chart,
# the JSON) and is never one: a head that spreads evenly is doing nothing in particular.
BROAD = "broad"
BROAD_COLUMN = "spread out"
BROAD_MEANING = "how evenly a head spreads its attention (1: over every token alike), not a type"

TYPE_MIN = 0.4
TYPE_RATIO = 3.0
RULE = (
    f"a head has a type when its score is at least {TYPE_MIN:.1f} and at least {TYPE_RATIO:.0f}x the same "
    f"head's in the untrained model"
)
CLOSE = 0.6  # a head with at least this share of the score a type needs is close to it


def type_scores(heads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{type: [layer, head]} for the types a pass's head scores measured."""
    scores = {name: t.read(heads) if t.read is not None else heads.get(name) for name, t in TYPES.items()}
    return {name: values for name, values in scores.items() if values is not None}


@dataclass
class TypedHead:
    name: str  # "L1H3"
    layer: int
    head: int
    kind: str | None  # the type, or None
    score: float | None  # its score, or None


def head_types(trained: dict[str, torch.Tensor], untrained: dict[str, torch.Tensor]) -> dict[str, TypedHead]:
    """Every head's type (see the module's rule) from its type scores (`type_scores`) and the untrained
    model's; without untrained ones ({}), the ratio is not asked."""
    n_layer, n_head = next(iter(trained.values())).shape if trained else (0, 0)
    out = {}
    for layer in range(n_layer):
        for head in range(n_head):
            passed = {}
            for kind, values in trained.items():
                value, before = float(values[layer, head]), untrained.get(kind)
                if value >= needed(float(before[layer, head]) if before is not None else None):  # never NaN
                    passed[kind] = value
            kind = max(passed, key=lambda k: (passed[k], -list(TYPES).index(k)), default=None)
            name = head_name(layer, head)
            out[name] = TypedHead(name, layer, head, kind, passed.get(kind))
    return out


def needed(untrained: float | None) -> float:
    """The score a head needs for a type, given the same head's untrained score (None: not known)."""
    return max(TYPE_MIN, TYPE_RATIO * untrained) if untrained is not None else TYPE_MIN


def heads_of(types: dict[str, TypedHead], kind: str) -> list[TypedHead]:
    """The heads of one type, highest score first (earliest first on ties)."""
    return sorted((t for t in types.values() if t.kind == kind), key=lambda t: -(t.score or 0.0))
