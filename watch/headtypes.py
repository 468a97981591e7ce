"""What kind of head each head became: its strongest type where that is clearly learned.

A head has type T when its T score is at least `TYPE_MIN` and at least `TYPE_RATIO` times the same
head's score in the untrained model of the same config and seed (so a head that attends to the
previous token only because every row of a young model is nearly uniform over a few positions is
not called a previous-token head). Among the types a head passes, the highest score wins. `broad`
is reported beside the type, not as one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from watch.heads import head_name
from watch.pipeline import Results
from watch.probesets import REPEATED, TEXT
from watch.scores import POSITIONAL_OFFSETS

TYPES = ("previous_token", "duplicate_token", "induction", "sink", "current_token", "positional")
LABELS = {"previous_token": "previous-token", "duplicate_token": "duplicate-token", "induction": "induction",
          "sink": "first-token (sink)", "current_token": "current-token", "positional": "positional"}
TYPE_SETS = (REPEATED, TEXT)   # the probe sets the types (and the in-context numbers) are measured on
CONTEXT_NUMBERS = ("in_context_gain", "in_context_score", "loss_first_copy", "loss_second_copy", "text_loss")
TYPE_MIN = 0.4
TYPE_RATIO = 3.0


def positional(results: Results) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(score [layer, head], offset [layer, head]): each head's best fixed offset k in 2..8 and its
    weight there; None without held-out text."""
    scores = [results.heads.get(f"positional_{k}") for k in POSITIONAL_OFFSETS]
    if any(s is None for s in scores):
        return None
    stacked = torch.stack(scores)                          # [k, layer, head]
    best, index = stacked.max(dim=0)
    return best, torch.tensor(list(POSITIONAL_OFFSETS))[index]


def type_scores(results: Results) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """({type: [layer, head]} for the types these results measured, each head's best positional offset
    [layer, head] or None without held-out text)."""
    out = {name: results.heads[name] for name in TYPES if name in results.heads}
    found = positional(results)
    if found is None:
        return out, None
    out["positional"] = found[0]
    return out, found[1]


def head_labels(types: dict[str, HeadType]) -> dict[str, str]:
    """{"L1H3": "induction", ...} for the heads that have a type."""
    return {name: LABELS[t.kind] for name, t in types.items() if t.kind}


@dataclass
class HeadType:
    name: str                   # "L1H3"
    layer: int
    head: int
    kind: str | None            # the type, or None
    score: float | None         # its score, or None


def head_types(trained: dict[str, torch.Tensor], untrained: dict[str, torch.Tensor]) -> dict[str, HeadType]:
    """Every head's type (see the module's rule) from its type scores (`type_scores`) and the untrained
    model's; without untrained ones ({}), the ratio is not asked."""
    n_layer, n_head = next(iter(trained.values())).shape if trained else (0, 0)
    out = {}
    for layer in range(n_layer):
        for head in range(n_head):
            passed = {}
            for kind, values in trained.items():
                value = float(values[layer, head])
                if torch.isnan(values[layer, head]) or value < TYPE_MIN:
                    continue
                before = untrained.get(kind)
                if before is not None and value < TYPE_RATIO * float(before[layer, head]):
                    continue
                passed[kind] = value
            kind = max(passed, key=lambda k: (passed[k], -TYPES.index(k)), default=None)
            name = head_name(layer, head)
            out[name] = HeadType(name, layer, head, kind, passed.get(kind))
    return out


def heads_of(types: dict[str, HeadType], kind: str) -> list[str]:
    """The heads of one type, highest score first."""
    found = [t for t in types.values() if t.kind == kind]
    return [t.name for t in sorted(found, key=lambda t: -(t.score or 0.0))]
