"""Text views of what the heads do: the head table (for a terminal or as Markdown for
TensorBoard), the line of baselines under it, the ablation line, and what a query attends
to most. Token labels for every view, heatmaps included, come from `display_token`."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import torch

from watch.heads import head_name
from watch.metrics import HeadStats, ProbeReport

PRONOUNS = {"he", "she", "it", "they", "him", "her", "them", "his", "its", "their"}
COLUMNS = ("rank", "head", "referent", "distractor", "top-1", "ref (no sink)", "top-1 (no sink)")


def display_token(token: str, space_mark: str = "·") -> str:
    """A token as a readable label: GPT-2's leading space becomes a subtle `space_mark`,
    newlines and tabs are written as escapes, and a token of only spaces stays visible."""
    text = token.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    if not text:
        return "∅"
    if not text.strip(" "):
        return "·" * len(text)
    if text.startswith(" "):
        text = space_mark + text[1:]
    return text


def head_table(report: ProbeReport, *, markdown: bool = False, limit: int | None = None) -> str:
    """The heads ranked best first, with the baselines line under them.

    Plain text has aligned columns and the best head marked '*'; Markdown (TensorBoard's
    Text tab) has the best head in bold. Both show the same cells. `limit` keeps only the
    first rows (the baselines line still covers all probes).
    """
    rows = [_cells(rank, stats) for rank, stats in enumerate(report.ranked()[:limit], start=1)]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|---:|:---|---:|---:|---:|---:|---:|"]
        lines += ["| " + " | ".join([row[0], f"**{row[1]}**" if i == 0 else row[1], *row[2:]]) + " |"
                  for i, row in enumerate(rows)]
        return "\n".join([*lines, "", summary_line(report)])
    table = [["", *COLUMNS], *[["*" if i == 0 else "", *row] for i, row in enumerate(rows)]]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]

    def line(cells: list[str]) -> str:
        # Names left-aligned, numbers right-aligned so their decimal points line up.
        out = [c.ljust(widths[i]) if i in (0, 2) else c.rjust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    lines = [line(table[0]), line(["-" * w for w in widths]), *[line(row) for row in table[1:]]]
    return "\n".join([*lines, summary_line(report)])


def _cells(rank: int, s: HeadStats) -> list[str]:
    return [str(rank), s.name, _num(s.referent), _num(s.distractor), _pct(s.top1, 1), _num(s.referent_no_sink),
            _pct(s.top1_no_sink, 1)]


def summary_line(report: ProbeReport) -> str:
    """Probe count, baselines and continuation accuracy in one line."""
    parts = [f"{report.n_probes} probes", f"chance {_pct(report.baselines['chance'])}",
             f"first noun {_pct(report.baselines['first_noun'])}",
             f"nearest noun {_pct(report.baselines['nearest_noun'])}"]
    cont = report.continuation
    if cont.n:
        parts.append(f"continuation accuracy {_pct(cont.accuracy)} ({cont.n_correct}/{cont.n})")
    if cont.logit_diff is not None:
        parts.append(f"logit diff {cont.logit_diff:+.2f}")
    if report.ablated:
        parts.append("ablated " + ", ".join(report.ablated))
    return "; ".join(parts)


def ablation_line(before: float, after: float, heads: Sequence[str]) -> str:
    """How continuation accuracy changes when `heads` are removed, in one line."""
    return (f"continuation accuracy after the pronoun: {before:.3f}; with {', '.join(heads)} ablated: "
            f"{after:.3f} ({100 * (after - before):+.1f} points)")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(value: float | None, decimals: int = 0) -> str:
    return "-" if value is None else f"{100 * value:.{decimals}f}%"


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
