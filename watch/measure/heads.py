"""Head names in TransformerLens's style ("L1H3" is layer 1, head 3, both zero-based), the heads to remove by name
(an `Ablation`, which the model is told as edits of its heads' outputs: model/hooks.py), and how every view labels
tokens and picks the query and head it shows first. Readers (`report`) and drawers (`heatmaps`, `page`) alike take
their labels from here."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from common.cli import for_terminal
from common.parsing import parse_int, quoted
from model.hooks import Edits, removed_heads, site_name

_HEAD = re.compile(r"L([0-9]+)H([0-9]+)", re.IGNORECASE)  # ASCII digits: what parse_int reads
_FORM = "L<layer>H<head>, e.g. L1H3 (zero-based)"

Head = tuple[int, int]  # (layer, head)


def head_name(layer: int, head: int) -> str:
    """(1, 3) -> "L1H3"."""
    return f"L{layer}H{head}"


def parse_head(text: str, n_layer: int | None = None, n_head: int | None = None) -> Head:
    """ "L1H3" (any case, surrounding spaces allowed) -> (1, 3); with `n_layer` / `n_head` the head must also exist
    in such a model. Raises ValueError with a one-line message naming the bad value."""
    match = _HEAD.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"bad head name {quoted(text) if isinstance(text, str) else text!r}: expected {_FORM}")
    try:
        layer, head = parse_int(match.group(1)), parse_int(match.group(2))
    except ValueError as exc:  # more digits than any model has layers or heads
        raise ValueError(f"bad head name {quoted(text.strip())}: {exc}; expected {_FORM}") from None
    last = f"L{'<layer>' if n_layer is None else n_layer - 1}H{'<head>' if n_head is None else n_head - 1}"
    for what, value, count, whose in (
        ("layer", layer, n_layer, "the model's layers"),
        ("head", head, n_head, "each layer's heads"),
    ):
        if count is not None and value >= count:
            raise ValueError(
                f"head {text.strip()!r} names {what} {value}, but {whose} are 0..{count - 1}; expected L0H0 to {last}"
            )
    return layer, head


@dataclass(frozen=True)
class Ablation:
    """Heads removed, as (layer, head) pairs counted from zero (kept sorted, each once), and what takes the place of
    each one's output: zeros when `means` is None (zero-ablation), else `means` {layer: [n_head, head_dim]}, each head's
    mean output over some text (mean-ablation), so the layers after it still see an output of the usual size and
    direction and only what the head does differently from token to token is removed."""

    heads: tuple[tuple[int, int], ...]  # any iterable of pairs is taken, and kept as this
    means: dict[int, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(sorted({(int(layer), int(head)) for layer, head in self.heads})))

    @property
    def mode(self) -> str:
        """ "zero" or "mean": what replaces a removed head's output."""
        return "zero" if self.means is None else "mean"

    def edits(self) -> Edits:
        """How the model is told: an edit of each such layer's heads' outputs (`hook_z`)."""
        by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            by_layer.setdefault(layer, []).append(head)
        means = self.means or {}
        return {site_name("z", layer): removed_heads(heads, means.get(layer)) for layer, heads in by_layer.items()}


def ablation_for(
    heads: Iterable[str | Head],
    n_layer: int | None = None,
    n_head: int | None = None,
    means: dict[int, torch.Tensor] | None = None,
) -> Ablation | None:
    """Head names or (layer, head) pairs -> the `Ablation` that removes them (mean-ablation with `means`,
    zero-ablation without); None when no head is named."""
    pairs = [parse_head(item if isinstance(item, str) else head_name(*item), n_layer, n_head) for item in heads]
    return Ablation(pairs, means) if pairs else None


def ablation_names(ablation: Ablation | None) -> list[str]:
    """The removed heads' names ("L1H0", "L1H2"), for reports."""
    return [head_name(layer, head) for layer, head in (ablation.heads if ablation is not None else ())]


# --- what a view shows --------------------------------------------------------------------------------

PRONOUNS = {"he", "she", "it", "they", "him", "her", "them", "his", "its", "their"}


def display_token(token: str, space_mark: str = "·") -> str:
    """A token as a readable label: GPT-2's leading space becomes a subtle `space_mark`, every
    character a terminal would act on (newline, tab, ESC, ...) is written as its escape
    (`cli.for_terminal`), and a token of only spaces stays visible."""
    text = for_terminal(token)
    if not text:
        return "∅"
    if not text.strip(" "):
        return "·" * len(text)
    if text.startswith(" "):
        text = space_mark + text[1:]
    return text


def last_pronoun_pos(tokens: list[str]) -> int | None:
    """Index of the last token that is a third-person pronoun, if any."""
    for i in range(len(tokens) - 1, -1, -1):
        if re.sub(r"\W", "", tokens[i]).lower() in PRONOUNS:
            return i
    return None


def default_query(tokens: list[str]) -> int:
    """The query a sentence is shown from unless one is asked for: its last pronoun, else its last token."""
    found = last_pronoun_pos(tokens)
    return len(tokens) - 1 if found is None else found


def focused_head(patterns: Sequence[torch.Tensor], query: int) -> tuple[int, int]:
    """The head whose query row puts the most weight on one earlier token,
    position 0 and the token itself excluded (they absorb idle attention)."""
    best, best_weight = (len(patterns) - 1, 0), -1.0
    for layer, pattern in enumerate(patterns):
        rows = pattern[:, query, 1:query].numpy() if query > 1 else np.zeros((pattern.shape[0], 1))
        for head in range(pattern.shape[0]):
            weight = float(rows[head].max()) if rows.size else 0.0
            if weight > best_weight:
                best, best_weight = (layer, head), weight
    return best


def with_spread(value: float, spread: float | None = None, digits: int = 3, *, signed: bool = False) -> str:
    """A figure as every view writes it: "0.412 ± 0.021" (with `signed`, "+0.412 ± 0.021"), without "± ..." where it
    has no spread (None or NaN), at `digits` decimals or at as many more as show the spread's first digit: a spread
    below 0.0005 is not "± 0.000", which would say that every draw agrees."""
    digits = _places(spread, digits)
    figure = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return figure if spread is None or spread != spread else f"{figure} ± {spread:.{digits}f}"


def _places(spread: float | None, digits: int) -> int:
    """`digits`, or as many decimals as show the first digit of a smaller spread."""
    if spread is None or not 0 < spread < 0.5 * 10**-digits:
        return digits
    return -math.floor(math.log10(spread))
