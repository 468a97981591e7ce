"""What fine-tuning changed: a second baseline beside the untrained model's, the model before fine-tuning.

A fine-tune (`init_from`) starts from a model whose heads already have types. Its reading, taken once when
training starts (both against the same untrained model), is set beside every later one: a table of the heads
with a type before or now, a line naming the heads whose type changed, the page's head labels, and TensorBoard's
text table, constant "before fine-tuning" scalars and the charts that draw each type's best head now and before.
"""

from __future__ import annotations

from typing import Any

from watch.heads import head_name
from watch.headtypes import LABELS, TYPES
from watch.reading import Reading
from watch.report import _table

BEFORE_TAG = "before_fine_tuning"   # TensorBoard: before_fine_tuning/{type} in each head's run, .../best, the table
NONE = "-"


def _label(kind: str | None) -> str:
    return LABELS[kind] if kind else NONE


def changed_heads(reading: Reading, before: Reading) -> list[str]:
    """The heads whose type fine-tuning changed (gained, lost or another), in layer order."""
    return [name for name, head in reading.types.items() if head.kind != before.types[name].kind]


def before_table(reading: Reading, before: Reading, *, markdown: bool = False) -> str:
    """The heads with a type before fine-tuning or now (changed ones marked): each type before and now, and each
    type score as "before -> now"; "" when no head has a type, before or now."""
    kinds = [kind for kind in TYPES if kind in reading.type_scores and kind in before.type_scores]
    changed = set(changed_heads(reading, before))
    rows, marked = [], []
    for name, head in reading.types.items():
        was = before.types[name].kind
        if head.kind is None and was is None:
            continue
        if name in changed:
            marked.append(len(rows))
        scores = [f"{float(before.type_scores[kind][head.layer, head.head]):.2f} -> "
                  f"{float(reading.type_scores[kind][head.layer, head.head]):.2f}" for kind in kinds]
        rows.append([name, _label(was), _label(head.kind), *scores])
    if not rows:
        return ""
    columns = ("head", "before fine-tuning", "now", *(LABELS[kind] for kind in kinds))
    return "\n".join(_table(columns, rows, markdown, marked=marked, text_columns=(0, 1, 2)))


def changes_line(reading: Reading, before: Reading) -> str:
    """Which heads' types fine-tuning changed, in one line."""
    changed = changed_heads(reading, before)
    if not changed:
        typed = sum(head.kind is not None for head in reading.types.values())
        return f"fine-tuning changed no head's type ({typed} of {len(reading.types)} heads have one)"
    shown = ", ".join(f"{name} {_label(before.types[name].kind)} -> {_label(reading.types[name].kind)}"
                      for name in changed[:8])
    more = f" and {len(changed) - 8} more" if len(changed) > 8 else ""
    return f"fine-tuning changed the type of {len(changed)} of {len(reading.types)} heads: {shown}{more}"


def before_labels(reading: Reading, before: Reading) -> dict[str, str]:
    """The page's head labels: each head's type, and where fine-tuning changed it, what it was."""
    labels = {}
    for name, head in reading.types.items():
        was = before.types[name].kind
        if head.kind == was:
            if head.kind:
                labels[name] = LABELS[head.kind]
        else:
            labels[name] = f"{_label(head.kind)} (before fine-tuning: {_label(was)})"
    return labels


def log_before(writer: Any, step: int, reading: Reading, before: Reading) -> None:
    """The model before fine-tuning at `step`: its type scores as constant scalars, and the table of what changed."""
    for kind, values in before.type_scores.items():
        for layer in range(values.shape[0]):
            for head in range(values.shape[1]):
                writer.head(head_name(layer, head)).add_scalar(f"{BEFORE_TAG}/{kind}", float(values[layer, head]), step)
        writer.add_scalar(f"{BEFORE_TAG}/{kind}/best", float(values.max()), step)
    text = f"step {step}: {changes_line(reading, before)}\n\n{before_table(reading, before, markdown=True)}"
    writer.add_text(f"heads/{BEFORE_TAG}", text.rstrip(), step)
