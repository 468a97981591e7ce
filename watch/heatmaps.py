"""Attention heatmaps: rows are queries, columns the keys they attend to.

Figures are built from `matplotlib.figure.Figure` on an Agg canvas, never
through pyplot, so nothing accumulates in pyplot's list of open figures
during a long training run and no backend is switched for the caller.
"""

from __future__ import annotations

import math
import re
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
from matplotlib.text import Text

from files import replace_file
from watch.heads import head_name
from watch.report import display_token

ANNOTATE_MAX_TOKENS = 16   # beyond this, numbers in cells no longer fit
LABEL_MAX_TOKENS = 64      # beyond this, only every n-th token is labelled
NUMBER_MIN_WEIGHT = 0.05   # cells below this weight show no number
DPI = 80                   # sharp enough for 9-point labels, with a third fewer pixels to encode than 100
CMAP = matplotlib.colormaps["viridis"].with_extremes(bad="white")  # blank for the masked future


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


class HeatmapFigure:
    """Heatmaps of one sentence's attention, one panel per head, that can be
    redrawn with new weights.

    Building a figure and laying it out costs more than drawing it, so a
    training run keeps one per sentence and layer and, at each evaluation, only
    `update`s the colours, numbers and titles, and `render`s: the first render
    draws everything and keeps the parts that never change (axes, token labels,
    colour bar) as a background; later ones draw only the changing parts over it.
    """

    def __init__(self, tokens: Sequence[str], n_panels: int, *, highlight_query: int | None = None) -> None:
        self.tokens = list(tokens)
        n = len(self.tokens)
        self.font = _font(n)
        single = n_panels == 1
        cols = math.ceil(math.sqrt(n_panels))
        rows = math.ceil(n_panels / cols)
        side = _side(n)
        self.figure = _new_figure(cols * side + 1.2, rows * side + (0.0 if single else 0.5))
        axes = self.figure.subplots(rows, cols, squeeze=False).ravel()
        for ax in axes[n_panels:]:
            ax.set_axis_off()
        self.axes = list(axes[:n_panels])
        empty = np.full((n, n), np.nan)
        self.images = [self._panel(ax, empty, highlight_query) for ax in self.axes]
        # (query, key) -> the number drawn in that cell, for every visible cell of every panel
        self.cells: list[dict[tuple[int, int], Text]] = [self._numbers(ax) for ax in self.axes]
        self.figure.colorbar(self.images[-1], ax=self.axes, shrink=0.8 if single else 0.6, label="attention weight")
        self.suptitle = self.figure.suptitle("")
        self._background = None  # what render() keeps of the first drawing

    def _panel(self, ax: Axes, values: np.ndarray, highlight_query: int | None) -> AxesImage:
        n, font = len(self.tokens), self.font
        image = ax.imshow(values, cmap=CMAP, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal")
        labels = [display_token(t) for t in self.tokens]
        stride = max(1, math.ceil(n / LABEL_MAX_TOKENS))
        ticks = list(range(0, n, stride))
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=font)
        ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=font)
        # No frame and no tick marks: the cells are the frame, and nothing drawn once lies over them.
        ax.spines[:].set_visible(False)
        ax.tick_params(length=0)
        ax.set_xlabel("key (attended to)", fontsize=font + 1)
        ax.set_ylabel("query", fontsize=font + 1)
        if highlight_query is not None and 0 <= highlight_query < n:
            ax.add_patch(Rectangle((-0.5, highlight_query - 0.5), highlight_query + 1, 1, fill=False,
                                   edgecolor="red", linewidth=1.5))
        return image

    def _numbers(self, ax: Axes) -> dict[tuple[int, int], Text]:
        n = len(self.tokens)
        if n > ANNOTATE_MAX_TOKENS:
            return {}
        # Inside the axes, so they need no room of their own: leaving them out
        # of the layout saves measuring every one of them.
        return {(q, k): ax.text(k, q, "", ha="center", va="center", fontsize=self.font - 1.5, in_layout=False)
                for q in range(n) for k in range(q + 1)}

    def update(self, patterns: Sequence[torch.Tensor | np.ndarray], titles: Sequence[str],
               suptitle: str | None = None) -> Figure:
        """Show new weights (one [query_pos, key_pos] pattern per panel); returns the figure."""
        if len(patterns) != len(self.axes) or len(titles) != len(self.axes):
            raise ValueError(f"this figure has {len(self.axes)} panels, got {len(patterns)} patterns "
                             f"and {len(titles)} titles")
        for ax, image, cells, pattern, title in zip(self.axes, self.images, self.cells, patterns, titles,
                                                    strict=True):
            values = _matrix(pattern, self.tokens)
            image.set_data(values)
            ax.set_title(title, fontsize=self.font + 2)
            for (q, k), text in cells.items():
                v = values[q, k]
                text.set_text(_cell_text(v))
                # Dark text on the bright end of viridis, light text on the dark end.
                text.set_color("black" if v > 0.55 else "white")
        if suptitle is not None:
            self.suptitle.set_text(suptitle)
        return self.figure

    def render(self) -> np.ndarray:
        """The figure as it now stands, as an RGB array [height, width, 3].

        Only the cells, their numbers and the titles change between evaluations, so after
        the first render those alone are drawn, over a copy of everything else. (The
        layout stays as the first drawing found it.) A figure once rendered this way
        draws its changing parts only through `render`, not through `savefig`.
        """
        canvas = self.figure.canvas
        changing = [self.suptitle]
        for ax in self.axes:  # the cells and what lies on top of them, in the order a full draw keeps
            on_top = [*ax.images, *ax.patches, *ax.texts, ax.title]
            changing += sorted(on_top, key=lambda artist: artist.get_zorder())
        if self._background is None:
            for artist in changing:
                artist.set_animated(True)   # left out of a plain draw, though not out of the layout
            canvas.draw()
            self.figure.set_layout_engine("none")          # keep the layout that draw found
            self._background = canvas.copy_from_bbox(self.figure.bbox)
        canvas.restore_region(self._background)
        for artist in changing:
            self.figure.draw_artist(artist)
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _cell_text(value: float) -> str:
    """".88" (fits a small cell); blank below 0.05, so the weights that matter stand out, and
    the drawing, whose cost is mostly these numbers, stays quick."""
    if not value >= NUMBER_MIN_WEIGHT:  # also blank for the masked future (NaN)
        return ""
    return "1" if value >= 0.995 else f"{value:.2f}"[1:]


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _side(n: int) -> float:
    """Inches for an n-token heatmap: room for the cell numbers when they are drawn."""
    per_token = 0.38 if n <= ANNOTATE_MAX_TOKENS else 0.2
    return min(12.0, max(3.0, 1.5 + per_token * n))


def _font(n: int) -> float:
    return 9.0 if n <= ANNOTATE_MAX_TOKENS else 7.0 if n <= 40 else 5.0


def _layer_pattern(pattern: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(pattern, torch.Tensor):
        pattern = pattern.detach().float().cpu().numpy()
    pattern = np.asarray(pattern)
    if pattern.ndim != 3:
        raise ValueError(f"a layer's pattern must be [head, query_pos, key_pos], got shape {pattern.shape}")
    return pattern


def head_titles(layer: int, n_head: int, best: str | None = None) -> list[str]:
    """Panel titles of a layer figure: every head named LlHh, `best` marked."""
    names = [head_name(layer, head) for head in range(n_head)]
    return [f"{name} (best)" if name == best else name for name in names]


def head_figure(pattern: torch.Tensor | np.ndarray, tokens: Sequence[str], title: str, *,
                highlight_query: int | None = None) -> Figure:
    """One head's pattern [query_pos, key_pos] as a heatmap with a colorbar.

    `highlight_query` outlines one query row (a probe's pronoun, say).
    """
    return HeatmapFigure(tokens, 1, highlight_query=highlight_query).update([pattern], [title])


def layer_figure(pattern: torch.Tensor | np.ndarray, tokens: Sequence[str], layer: int, *,
                 title: str | None = None, highlight_query: int | None = None,
                 best: str | None = None) -> Figure:
    """All heads of one layer ([head, query_pos, key_pos]) in a grid, each titled LlHh.

    `best` names a head (e.g. "L1H0") to mark in its subplot title.
    """
    pattern = _layer_pattern(pattern)
    n_head = pattern.shape[0]
    heatmap = HeatmapFigure(tokens, n_head, highlight_query=highlight_query)
    return heatmap.update(list(pattern), head_titles(layer, n_head, best), title or f"layer {layer}")


def sentence_slug(text: str, max_len: int = 40) -> str:
    """A tag-safe name for a sentence, stable across steps so its images line up in TensorBoard."""
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:max_len].rstrip("_")
    return slug or "sentence"


def unique_slugs(sentences: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    slugs = []
    for text in sentences:
        slug = sentence_slug(text)
        seen[slug] = seen.get(slug, 0) + 1
        slugs.append(slug if seen[slug] == 1 else f"{slug}_{seen[slug]}")
    return slugs


class SentenceHeatmaps:
    """The heatmaps of a run's watched sentences at each evaluation: per sentence, one figure per
    layer with every head, and the best head alone when there is one. The figures are built at
    the first evaluation and redrawn with new weights at the later ones, which is most of the cost
    saved; each comes back as a (tag, RGB image) pair for TensorBoard."""

    def __init__(self) -> None:
        self.figures: dict[str, HeatmapFigure] = {}

    def images(self, step: int, texts: Sequence[str], tokens: Sequence[Sequence[str]],
               patterns: Sequence[Sequence[torch.Tensor]], best: tuple[str, int, int, str] | None = None,
               highlights: dict[str, int] | None = None) -> list[tuple[str, np.ndarray]]:
        """`patterns[sentence][layer]` [head, query_pos, key_pos]; `best` (name, layer, head, title) marks
        a head and draws it alone; `highlights` outlines a query row of a sentence (by its text)."""
        out = []
        for slug, text, toks, layers in zip(unique_slugs(texts), texts, tokens, patterns, strict=True):
            highlight = (highlights or {}).get(text)
            highlight = highlight if highlight is not None and highlight < len(toks) else None
            for layer, pattern in enumerate(layers):
                tag, n_head = f"attention/{slug}/layer{layer}", pattern.shape[0]
                heatmap = self._figure(tag, toks, n_head, highlight)
                heatmap.update(list(pattern), head_titles(layer, n_head, best[0] if best else None),
                               f"layer {layer}, step {step}")
                out.append((tag, heatmap.render()))
            if best is not None:
                name, layer, head, title = best
                tag = f"attention/{slug}/best_head"
                heatmap = self._figure(tag, toks, 1, highlight)
                heatmap.update([layers[layer][head]], [f"{title}, step {step}"])
                out.append((tag, heatmap.render()))
        return out

    def _figure(self, tag: str, tokens: Sequence[str], n_panels: int, highlight: int | None) -> HeatmapFigure:
        """The figure kept for `tag` when it still fits these tokens, else a new one (kept)."""
        heatmap = self.figures.get(tag)
        if heatmap is None or heatmap.tokens != list(tokens) or len(heatmap.axes) != n_panels:
            heatmap = self.figures[tag] = HeatmapFigure(tokens, n_panels, highlight_query=highlight)
        return heatmap


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as a PNG (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    # A new file renamed into place: a link under this name is replaced, never written through.
    return replace_file(path, lambda fh: fig.savefig(fh, format="png"))
