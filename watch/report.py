"""Plain-text views for a terminal: the head ranking, and what a query attends to most."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import torch

from watch.heads import head_name
from watch.heatmaps import display_token
from watch.metrics import ProbeReport, summary_line

PRONOUNS = {"he", "she", "it", "they", "him", "her", "them", "his", "its", "their"}


def format_head_table(report: ProbeReport, limit: int | None = None) -> str:
    """The heads ranked best first in aligned columns, the best marked with '*'.

    `limit` keeps only the first rows (the summary line still covers all probes).
    """
    header = ["", "rank", "head", "referent", "distractor", "top-1", "ref (no sink)", "top-1 (no sink)"]
    rows = []
    for rank, s in enumerate(report.ranked()[:limit], start=1):
        rows.append(["*" if rank == 1 else "", str(rank), s.name, _num(s.referent), _num(s.distractor),
                     _pct(s.top1), _num(s.referent_no_sink), _pct(s.top1_no_sink)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        # Names left-aligned, numbers right-aligned so their decimal points line up.
        out = [c.ljust(widths[i]) if i in (0, 2) else c.rjust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    lines = [line(header), line(["-" * w for w in widths])]
    lines += [line(row) for row in rows]
    lines.append(summary_line(report))
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def top_attended(pattern: torch.Tensor | np.ndarray, tokens: Sequence[str], query_pos: int, k: int = 3,
                 *, layer: int = 0) -> str:
    """One line per head of the `k` keys the query at `query_pos` weighs most,
    e.g. "L0H1: dog 0.88 | ball 0.09 | the 0.02". `pattern` is [head, query_pos, key_pos]."""
    if isinstance(pattern, torch.Tensor):
        pattern = pattern.detach().float().cpu().numpy()
    pattern = np.asarray(pattern)
    if pattern.ndim != 3:
        raise ValueError(f"pattern must be [head, query_pos, key_pos], got shape {pattern.shape}")
    if not 0 <= query_pos < pattern.shape[1]:
        raise ValueError(f"query_pos {query_pos} is outside the {pattern.shape[1]} positions")
    lines = []
    for head in range(pattern.shape[0]):
        row = pattern[head, query_pos, :query_pos + 1]  # keys after the query are masked out
        # Stable sort, so equal weights keep sentence order.
        order = np.argsort(-row, kind="stable")[:k]
        cells = [f"{display_token(tokens[i], space_mark='')} {row[i]:.2f}" for i in order]
        lines.append(f"{head_name(layer, head)}: " + " | ".join(cells))
    return "\n".join(lines)


def last_pronoun_pos(tokens: list[str]) -> int | None:
    """Index of the last token that is a third-person pronoun, if any."""
    for i in range(len(tokens) - 1, -1, -1):
        if re.sub(r"\W", "", tokens[i]).lower() in PRONOUNS:
            return i
    return None
