"""Head names in TransformerLens's style: "L1H3" is layer 1, head 3, both zero-based."""

from __future__ import annotations

import re
from collections.abc import Iterable

_HEAD = re.compile(r"L(\d+)H(\d+)", re.IGNORECASE)
_FORM = "L<layer>H<head>, e.g. L1H3 (zero-based)"

Head = tuple[int, int]  # (layer, head)


def head_name(layer: int, head: int) -> str:
    """(1, 3) -> "L1H3"."""
    return f"L{layer}H{head}"


def parse_head(text: str, n_layer: int | None = None, n_head: int | None = None) -> Head:
    """"L1H3" (any case, surrounding spaces allowed) -> (1, 3).

    With `n_layer` / `n_head` the head must also exist in such a model.
    Raises ValueError with a one-line message naming the bad value.
    """
    match = _HEAD.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"bad head name {text!r}: expected {_FORM}")
    layer, head = int(match.group(1)), int(match.group(2))
    if n_layer is not None and layer >= n_layer:
        raise ValueError(f"head {text.strip()!r} names layer {layer}, but the model's layers are "
                         f"0..{n_layer - 1}; expected {_range(n_layer, n_head)}")
    if n_head is not None and head >= n_head:
        raise ValueError(f"head {text.strip()!r} names head {head}, but each layer's heads are "
                         f"0..{n_head - 1}; expected {_range(n_layer, n_head)}")
    return layer, head


def _range(n_layer: int | None, n_head: int | None) -> str:
    last_layer = "<layer>" if n_layer is None else str(n_layer - 1)
    last_head = "<head>" if n_head is None else str(n_head - 1)
    return f"L0H0 to L{last_layer}H{last_head}"


def ablation_for(heads: Iterable[str | Head], n_layer: int | None = None,
                 n_head: int | None = None) -> dict[int, list[int]]:
    """Head names or (layer, head) pairs -> the `ablate` mapping the model takes ({layer: [heads]})."""
    ablate: dict[int, list[int]] = {}
    for item in heads:
        name = item if isinstance(item, str) else head_name(*item)
        layer, head = parse_head(name, n_layer, n_head)
        if head not in ablate.setdefault(layer, []):
            ablate[layer].append(head)
    return {layer: sorted(hs) for layer, hs in sorted(ablate.items())}


def ablation_names(ablate: dict[int, list[int]] | None) -> list[str]:
    """{1: [0, 2]} -> ["L1H0", "L1H2"]: the ablated heads, for reports."""
    return [head_name(layer, head) for layer, heads in sorted((ablate or {}).items()) for head in sorted(heads)]
