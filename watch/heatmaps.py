"""Attention heatmaps: rows are queries, columns the keys they attend to.

Figures are built from `matplotlib.figure.Figure` on an Agg canvas, never
through pyplot, so nothing accumulates in pyplot's list of open figures
during a long training run and no backend is switched for the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle

from watch.heads import head_name

ANNOTATE_MAX_TOKENS = 16   # beyond this, numbers in cells no longer fit
LABEL_MAX_TOKENS = 64      # beyond this, only every n-th token is labelled
CMAP = matplotlib.colormaps["viridis"].with_extremes(bad="white")  # blank for the masked future


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


def _matrix(pattern: torch.Tensor | np.ndarray, tokens: Sequence[str]) -> np.ndarray:
    """[q, k] weights as float64 with the future (above the diagonal) set to NaN."""
    if isinstance(pattern, torch.Tensor):
        pattern = pattern.detach().float().cpu().numpy()
    values = np.array(pattern, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1]:
        raise ValueError(f"a head's pattern must be square [query_pos, key_pos], got shape {values.shape}")
    if values.shape[0] != len(tokens):
        raise ValueError(f"pattern covers {values.shape[0]} positions but {len(tokens)} tokens were given")
    values[np.triu_indices(values.shape[0], k=1)] = np.nan
    return values


def _draw(ax: Axes, values: np.ndarray, tokens: Sequence[str], title: str, *, font: float,
          highlight_query: int | None) -> AxesImage:
    n = values.shape[0]
    image = ax.imshow(values, cmap=CMAP, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal")
    labels = [display_token(t) for t in tokens]
    stride = max(1, math.ceil(n / LABEL_MAX_TOKENS))
    ticks = list(range(0, n, stride))
    ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=font)
    ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=font)
    ax.set_xlabel("key (attended to)", fontsize=font + 1)
    ax.set_ylabel("query", fontsize=font + 1)
    ax.set_title(title, fontsize=font + 2)
    if n <= ANNOTATE_MAX_TOKENS:
        for q in range(n):
            for k in range(q + 1):
                v = values[q, k]
                # Dark text on the bright end of viridis, light text on the dark end.
                ax.text(k, q, _cell_text(v), ha="center", va="center", fontsize=font - 1.5,
                        color="black" if v > 0.55 else "white")
    if highlight_query is not None and 0 <= highlight_query < n:
        ax.add_patch(Rectangle((-0.5, highlight_query - 0.5), highlight_query + 1, 1, fill=False,
                               edgecolor="red", linewidth=1.5))
    return image


def _cell_text(value: float) -> str:
    return "1" if value >= 0.995 else f"{value:.2f}"[1:]  # ".88": fits a small cell


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _side(n: int) -> float:
    """Inches for an n-token heatmap: room for the cell numbers when they are drawn."""
    per_token = 0.38 if n <= ANNOTATE_MAX_TOKENS else 0.2
    return min(12.0, max(3.0, 1.5 + per_token * n))


def _font(n: int) -> float:
    return 9.0 if n <= ANNOTATE_MAX_TOKENS else 7.0 if n <= 40 else 5.0


def head_figure(pattern: torch.Tensor | np.ndarray, tokens: Sequence[str], title: str, *,
                highlight_query: int | None = None) -> Figure:
    """One head's pattern [query_pos, key_pos] as a heatmap with a colorbar.

    `highlight_query` outlines one query row (a probe's pronoun, say).
    """
    values = _matrix(pattern, tokens)
    side = _side(len(tokens))
    fig = _new_figure(side + 1.2, side)
    ax = fig.add_subplot()
    image = _draw(ax, values, tokens, title, font=_font(len(tokens)), highlight_query=highlight_query)
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return fig


def layer_figure(pattern: torch.Tensor | np.ndarray, tokens: Sequence[str], layer: int, *,
                 title: str | None = None, highlight_query: int | None = None,
                 best: str | None = None) -> Figure:
    """All heads of one layer ([head, query_pos, key_pos]) in a grid, each titled LlHh.

    `best` names a head (e.g. "L1H0") to mark in its subplot title.
    """
    if isinstance(pattern, torch.Tensor):
        pattern = pattern.detach().float().cpu().numpy()
    pattern = np.asarray(pattern)
    if pattern.ndim != 3:
        raise ValueError(f"a layer's pattern must be [head, query_pos, key_pos], got shape {pattern.shape}")
    n_head, n = pattern.shape[0], len(tokens)
    cols = math.ceil(math.sqrt(n_head))
    rows = math.ceil(n_head / cols)
    side = _side(n)
    fig = _new_figure(cols * side + 1.2, rows * side + 0.5)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    image = None
    for head, ax in enumerate(axes):
        if head >= n_head:
            ax.set_axis_off()
            continue
        name = head_name(layer, head)
        image = _draw(ax, _matrix(pattern[head], tokens), tokens, f"{name} (best)" if name == best else name,
                      font=_font(n), highlight_query=highlight_query)
    fig.colorbar(image, ax=list(axes[:n_head]), shrink=0.6, label="attention weight")
    fig.suptitle(title or f"layer {layer}")
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as a PNG (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.savefig(path, format="png")
    return path
