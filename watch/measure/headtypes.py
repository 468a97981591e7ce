"""What kind of head each head became: its strongest type where that is clearly learned (`RULE`; among the types a
head passes, the highest score wins). The ratio to the same head of the untrained model of the same config and seed
keeps a head that looks at the previous token only because every row of a young model is nearly uniform over a few
positions from being called a previous-token head. A head's pronoun score is its mean weight from the pronoun on
the noun it refers to; `broad` is reported beside the type, not as one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from watch.measure.heads import head_name
from watch.measure.pipeline import Results
from watch.measure.probesets import PRONOUN, REPEATED, TEXT
from watch.measure.scores import POSITIONAL_OFFSETS

TYPES = ("previous_token", "duplicate_token", "induction", "sink", "current_token", "positional", "pronoun")
LABELS = {
    "previous_token": "previous-token",
    "duplicate_token": "duplicate-token",
    "induction": "induction",
    "sink": "first-token (sink)",
    "current_token": "current-token",
    "positional": "positional",
    "pronoun": "pronoun",
}
# What each type means, in a learner's words: the head tables' legend and the attention page's.
MEANINGS = {
    "previous_token": "looks at the token just before",
    "duplicate_token": "looks back at earlier copies of the same token",
    "induction": "looks at the token that followed an earlier copy of the current one (copying)",
    "sink": "parks its attention on the first token (nothing else to do)",
    "current_token": "looks at the token itself",
    "positional": "looks a fixed k tokens back",
    "pronoun": "looks from a pronoun at the noun it refers to",
}
TYPE_SETS = (REPEATED, TEXT, PRONOUN)  # the probe sets the types (and the in-context numbers) are measured on
CONTEXT_NUMBERS = (
    "in_context_gain",
    "in_context_gain_spread",
    "in_context_score",
    "in_context_score_spread",
    "loss_first_copy",
    "loss_second_copy",
    "text_loss",
)
TYPE_MIN = 0.4
TYPE_RATIO = 3.0
RULE = (
    f"a head has a type when its score is at least {TYPE_MIN:.1f} and at least {TYPE_RATIO:.0f}x the same "
    f"head's in the untrained model"
)


def type_scores(results: Results) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """({type: [layer, head]} for the types these results measured, each head's best positional offset
    [layer, head] or None without held-out text). A head's positional score is its weight at its best fixed
    offset k in 2..8."""
    out = {name: results.heads[name] for name in TYPES if name in results.heads}
    if "referent" in results.heads:  # the pronoun probes' mean referent weight
        out["pronoun"] = results.heads["referent"]
    scores = [results.heads.get(f"positional_{k}") for k in POSITIONAL_OFFSETS]
    if any(s is None for s in scores):
        return out, None
    out["positional"], index = torch.stack(scores).max(dim=0)  # over k: [k, layer, head] -> [layer, head]
    return out, torch.tensor(list(POSITIONAL_OFFSETS))[index]


@dataclass
class HeadType:
    name: str  # "L1H3"
    layer: int
    head: int
    kind: str | None  # the type, or None
    score: float | None  # its score, or None


def head_types(trained: dict[str, torch.Tensor], untrained: dict[str, torch.Tensor]) -> dict[str, HeadType]:
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
            kind = max(passed, key=lambda k: (passed[k], -TYPES.index(k)), default=None)
            name = head_name(layer, head)
            out[name] = HeadType(name, layer, head, kind, passed.get(kind))
    return out


def needed(untrained: float | None) -> float:
    """The score a head needs for a type, given the same head's untrained score (None: not known)."""
    return max(TYPE_MIN, TYPE_RATIO * untrained) if untrained is not None else TYPE_MIN


def heads_of(types: dict[str, HeadType], kind: str) -> list[HeadType]:
    """The heads of one type, highest score first (earliest first on ties)."""
    return sorted((t for t in types.values() if t.kind == kind), key=lambda t: -(t.score or 0.0))
