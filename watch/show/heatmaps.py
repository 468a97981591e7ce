"""Attention heatmaps (rows are queries, columns the keys they attend to), drawn straight into pixels with Pillow:
a figure of four 24-token panels takes a few milliseconds, against about 150 with a plotting library. A training
run redraws the same sentences at every evaluation, so what does not change is drawn once (`HeatmapCanvas`). Text
uses DejaVu Sans (wide Unicode coverage), shipped in watch/show/fonts/ with its licence, so the same attention draws the
same pixels on every machine. A run's pictures (`SentenceHeatmaps.images`, of a pass's `Reading`) go on to TensorBoard
(`watch.show.tensorboard.log_evaluation`); `sample.py --attention` saves them as PNG files.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import struct
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

from common.cli import for_terminal
from common.files import Kind
from data.tokenizer import Tokenizer
from watch.measure.composition import KINDS, Composition
from watch.measure.heads import display_token, head_name
from watch.measure.patching import PAIRS, PATHS, Patching, first_analysis
from watch.measure.probesets import ProbeSets
from watch.measure.reading import Reading

ANNOTATE_MAX_TOKENS = 16  # beyond this, numbers in cells no longer fit
LABEL_MAX_TOKENS = 64  # beyond this, only every n-th token is labelled
NUMBER_MIN_WEIGHT = 0.05  # cells below this weight show no number
FUTURE = (255, 255, 255)  # the masked upper triangle: blank
HIGHLIGHT = (220, 30, 30)  # the outline of a highlighted query row
INK = (34, 34, 34)
TOP, TITLE_H = 28, 22  # the heights of a figure's own title and of each panel's

# A perceptual ramp from dark violet through blue and green to yellow (low to high weight): dark
# enough at 0 for white numbers, light enough at 1 for black ones.
_RAMP = np.array(
    [(68, 1, 84), (65, 68, 135), (42, 120, 142), (34, 168, 132), (122, 209, 81), (253, 231, 37)], dtype=np.float64
)
LUT = (
    np.stack([np.interp(np.linspace(0, 1, 256), np.linspace(0, 1, len(_RAMP)), _RAMP[:, c]) for c in range(3)], axis=1)
    .round()
    .astype(np.uint8)
)  # [256, 3]


@cache
def font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(Path(__file__).parent / "fonts" / "DejaVuSans.ttf"), size)


def colours(values: np.ndarray) -> np.ndarray:
    """Weights in [0, 1] -> RGB [..., 3]; NaN (the masked future) -> blank."""
    index = np.clip(np.nan_to_num(values, nan=0.0) * 255 + 0.5, 0, 255).astype(np.int64)
    out = LUT[index]
    out[np.isnan(values)] = FUTURE
    return out


def _cells(values: np.ndarray, cell: int) -> np.ndarray:
    """Weights [rows, columns] as RGB pixels, each a square of `cell` pixels (np.repeat: np.kron, which multiplies
    every pixel by one, took a fifth of an evaluation's drawing)."""
    return colours(values).repeat(cell, axis=0).repeat(cell, axis=1)


def as_array(pattern: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(pattern, torch.Tensor):
        return pattern.detach().float().cpu().numpy()
    return np.asarray(pattern)


def _matrix(pattern: torch.Tensor | np.ndarray, n_tokens: int) -> np.ndarray:
    """[q, k] weights as float64 with the future (above the diagonal) set to NaN."""
    values = np.array(as_array(pattern), dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1]:
        raise ValueError(f"a head's pattern must be square [query_pos, key_pos], got shape {values.shape}")
    if values.shape[0] != n_tokens:
        raise ValueError(f"pattern covers {values.shape[0]} positions but {n_tokens} tokens were given")
    values[np.triu_indices(values.shape[0], k=1)] = np.nan
    return values


class HeatmapCanvas:
    """Heatmaps of one sentence's attention, one panel per head (in `columns` columns; by default as square a grid as
    they make): the labels, axis titles and colour bar are drawn once, and `draw` paints the cells, their numbers and
    the titles over a copy of that. What it last drew stays readable: `numbers[panel][(query, key)]` (the text in a
    cell) and `titles`."""

    def __init__(
        self, tokens: Sequence[str], n_panels: int, *, highlight_query: int | None = None, columns: int | None = None
    ) -> None:
        self.tokens = list(tokens)
        self.n_panels = n_panels
        n = len(self.tokens)
        if not n or n_panels < 1:
            raise ValueError("a heatmap needs at least one token and one panel")
        self.highlight = highlight_query if highlight_query is not None and 0 <= highlight_query < n else None
        self.cell = 26 if n <= ANNOTATE_MAX_TOKENS else max(4, min(20, 560 // n))
        self.label_size = 12 if n <= ANNOTATE_MAX_TOKENS else 10 if n <= 40 else 8
        self.labels = [display_token(t) for t in self.tokens]
        stride = max(1, math.ceil(n / LABEL_MAX_TOKENS))
        self.ticks = list(range(0, n, stride))
        widest = max(int(font(self.label_size).getlength(self.labels[i])) for i in self.ticks)
        self.side = side = self.cell * n
        self.left = self.below = widest + 26  # the labels (turned below), then room for "query" and "key"
        self.cols = columns or math.ceil(math.sqrt(self.n_panels))
        self.rows = math.ceil(self.n_panels / self.cols)
        self.panel_w = self.left + side + 16
        self.panel_h = TITLE_H + side + self.below + 12  # a gap before the next row's titles
        self.bar_w = 70  # the colour bar and its labels
        self.width = self.cols * self.panel_w + self.bar_w
        self.height = TOP + self.rows * self.panel_h
        self.background = self._background()
        self.numbers: list[dict[tuple[int, int], str]] = []
        self.titles: list[str] = []

    def _origin(self, panel: int) -> tuple[int, int]:
        """The top-left pixel of a panel's cells."""
        row, col = divmod(panel, self.cols)
        return col * self.panel_w + self.left, TOP + row * self.panel_h + TITLE_H

    def _background(self) -> Image.Image:
        image = Image.new("RGB", (self.width, self.height), "white")
        draw = ImageDraw.Draw(image)
        key = "key (attended to)" + ("; · a space before it" if any(t.startswith("·") for t in self.labels) else "")
        labels = [label if i in self.ticks else "" for i, label in enumerate(self.labels)]
        for panel in range(self.n_panels):
            at = (*self._origin(panel), self.left, self.below, self.cell)
            _label(image, at, (labels, labels), (key, "query"), self.label_size)
        height = max(60, min(self.rows * self.panel_h - TITLE_H - self.below, 400))
        colour_bar(image, draw, self.width - self.bar_w + 12, TOP + TITLE_H, height, "attention weight", -45)
        return image

    def draw(
        self, patterns: Sequence[torch.Tensor | np.ndarray], titles: Sequence[str], suptitle: str | None = None
    ) -> np.ndarray:
        """The heatmaps of these weights (one [query_pos, key_pos] pattern per panel) as an RGB array
        [height, width, 3]."""
        if len(patterns) != self.n_panels or len(titles) != self.n_panels:
            raise ValueError(
                f"this figure has {self.n_panels} panels, got {len(patterns)} patterns and {len(titles)} titles"
            )
        image = self.background.copy()
        draw = ImageDraw.Draw(image)
        title_font = font(self.label_size + 2)
        self.numbers, self.titles = [], list(titles)
        n = len(self.tokens)
        for panel, (pattern, title) in enumerate(zip(patterns, titles, strict=True)):
            values = _matrix(pattern, n)
            x0, y0 = self._origin(panel)
            image.paste(Image.fromarray(_cells(values, self.cell)), (x0, y0))
            draw.text((x0 + self.side // 2, y0 - 6), title, fill=INK, font=title_font, anchor="md")
            numbers = {}
            for q, k in zip(*np.tril_indices(n), strict=True) if n <= ANNOTATE_MAX_TOKENS else ():
                value = values[q, k]  # ".88" fits a small cell; none below NUMBER_MIN_WEIGHT, or for NaN
                text = ("1" if value >= 0.995 else f"{value:.2f}"[1:]) if value >= NUMBER_MIN_WEIGHT else ""
                numbers[(int(q), int(k))] = text
            _write(draw, (x0, y0, self.cell), numbers, values, max(8, self.label_size - 1))
            self.numbers.append(numbers)
            if self.highlight is not None:
                y = y0 + self.highlight * self.cell
                draw.rectangle(
                    [x0, y, x0 + (self.highlight + 1) * self.cell - 1, y + self.cell - 1], outline=HIGHLIGHT, width=2
                )
        if suptitle:
            draw.text((self.width // 2, 6), suptitle, fill=INK, font=font(15), anchor="mt")
        return np.asarray(image)


def _label(
    image: Image.Image, at: tuple[int, ...], labels: tuple[Sequence[str], ...], names: tuple | None, size: int
) -> None:
    """A panel's labels, `at` (x0, y0, left, below, cell) its cells' top-left corner, the room left of and below them
    and a cell's size: each row's at its left, each column's written upwards below it (`labels`: the rows', the
    columns'; "" for none), and `names`, the columns' and the rows', along them."""
    (x0, y0, left, below, cell), (rows, columns), draw = at, labels, ImageDraw.Draw(image)
    bottom = y0 + len(rows) * cell
    for r, text in enumerate(rows):
        draw.text((x0 - 4, y0 + r * cell + cell // 2), text, fill=INK, font=font(size), anchor="rm")
    for c, text in enumerate(columns):
        image.paste(_turned(text, size), (x0 + c * cell + cell // 2 - size // 2 - 1, bottom + 4))
    if names:
        middle = x0 + len(columns) * cell // 2
        draw.text((middle, bottom + below - 2), names[0], fill=INK, font=font(size + 1), anchor="md")
        image.paste(_turned(names[1], size + 1), (x0 - left + 2, y0 + max(0, (bottom - y0) // 2 - 30)))


def _write(draw: ImageDraw.ImageDraw, at: tuple[int, int, int], texts: dict, values: np.ndarray, size: int) -> None:
    """Each cell's text ({(row, column): text}) at its centre, `at` (x0, y0, cell) the cells' top-left corner and a
    cell's size: black on the bright end of the colours, white on the dark."""
    x0, y0, cell = at
    for (r, c), text in texts.items():
        if text:
            centre = (x0 + c * cell + cell // 2, y0 + r * cell + cell // 2)
            draw.text(centre, text, fill="black" if values[r, c] > 0.55 else "white", font=font(size), anchor="mm")


def colour_bar(
    image: Image.Image, draw: ImageDraw.ImageDraw, x0: int, y0: int, height: int, name: str, name_at: int
) -> None:
    """The colour ramp from 1 (top) to 0, `height` pixels tall at (x0, y0), ticked at 0, 0.5 and 1, `name` written
    upwards beside it, `name_at` pixels below its middle (a negative number: above it), or at its top when None."""
    image.paste(Image.fromarray(colours(np.linspace(1, 0, height)[:, None].repeat(14, axis=1))), (x0, y0))
    for value in (0.0, 0.5, 1.0):
        y = y0 + round((1 - value) * (height - 1))
        draw.line([(x0 + 14, y), (x0 + 17, y)], fill=INK)
        draw.text((x0 + 20, y), f"{value:g}", fill=INK, font=font(11), anchor="lm")
    image.paste(_turned(name, 11), (x0 + 38, y0 + (height // 2 + name_at if name_at is not None else 0)))


@cache
def _turned(text: str, size: int) -> Image.Image:
    """`text` at `size` pixels written upwards (a vertical strip), as axis labels are."""
    width = max(1, int(font(size).getlength(text)) + 2)
    strip = Image.new("RGB", (width, size + 4), "white")
    ImageDraw.Draw(strip).text((0, size // 2 + 2), text, fill=INK, font=font(size), anchor="lm")
    return strip.rotate(90, expand=True)


def head_titles(layer: int, n_head: int, best: str | None = None) -> list[str]:
    """Panel titles of a layer's heatmaps: every head named LlHh, `best` marked."""
    names = [head_name(layer, head) for head in range(n_head)]
    return [f"{name} (best)" if name == best else name for name in names]


def sentence_slug(text: str, *more: object, max_len: int = 40) -> str:
    """A file name's part for a sentence: its words (letters and digits of any script, joined by '_') up to
    `max_len` characters, then a short hash of the whole text and of `more`, whatever else makes the output
    different (a pair's corrupted prompt and answers), so names stay short enough for any folder and two outputs
    never share one ("the dog." and "the dog,", two sentences in another script, two pairs of one clean prompt)."""
    words = re.sub(r"[\W_]+", "_", text.lower()).strip("_")[:max_len].rstrip("_")
    return f"{words or 'sentence'}_{_short_hash(chr(0).join(map(str, (text, *more))))}"


def sentence_tag(text: str) -> str:
    """A sentence as TensorBoard shows it in a tag, stable across steps so its images line up: the whole sentence,
    with what a display would act on escaped (`cli.for_terminal`) and then, as no two sentences may share a tag,
    a short hash of the text."""
    shown = for_terminal(text)
    return shown if shown == text else f"{shown} #{_short_hash(text)}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


class SentenceHeatmaps:
    """What an evaluation draws for TensorBoard, as (tag, RGB array): per watched sentence an image per layer and
    the best pronoun head alone, then the composition matrix, each sentence's canvases kept from the first
    evaluation. `highlights` outlines a query row of a sentence (by its text)."""

    def __init__(
        self,
        sentences: Sequence[tuple[str, Sequence[str]]] = (),  # (text, its tokens)
        highlights: dict[str, int] | None = None,
    ) -> None:
        seen: dict[str, int] = {}
        self.sentences = []  # (tag's name, text, tokens); a sentence watched twice gets " (2)", " (3)", ...
        for text, tokens in sentences:
            name = sentence_tag(text)
            seen[name] = seen.get(name, 0) + 1
            self.sentences.append((name if seen[name] == 1 else f"{name} ({seen[name]})", text, tokens))
        self.highlights = highlights or {}
        self.canvases: dict[str, HeatmapCanvas] = {}

    def images(self, step: int, reading: Reading, *, every_layer: bool = True) -> list[tuple[str, np.ndarray]]:
        """The images of a pass's reading: `reading.results.patterns[sentence][layer]` [head, query_pos, key_pos]
        for the sentences, and `reading.composition` beside the untrained model's. Without `every_layer` (the passes
        between evaluations), of the sentences the best head's alone: the head that matters, as it forms, for an
        eighth of the drawing and compressing every layer's grids cost."""
        out = []
        best = reading.pronouns.best if reading.pronouns is not None else None
        drawn = zip(self.sentences, reading.results.patterns, strict=True) if every_layer or best else ()
        for (slug, text, tokens), layers in drawn:  # between evaluations, read for a best head alone
            for layer, pattern in enumerate(layers if every_layer else ()):
                tag, titles = f"attention/{slug}/layer{layer}", head_titles(layer, len(pattern), best and best.name)
                canvas = self._canvas(tag, text, tokens, len(pattern))
                out.append((tag, canvas.draw(list(pattern), titles, f"layer {layer}, step {step}")))
            if best is not None:
                tag = f"attention/{slug}/best_head"
                title = f"best head {best.name} (referent {best.referent:.2f}), step {step}"
                out.append((tag, self._canvas(tag, text, tokens, 1).draw([layers[best.layer][best.head]], [title])))
        if reading.composition is not None:
            title = f"composition at step {step}"
            if reading.untrained is not None:
                untrained = reading.untrained.composition.pairs
                highest = ", ".join(f"{kind} {max(untrained[kind].values()):.2f}" for kind in KINDS)
                title += f"; the untrained model's highest: {highest}"
            out.append(("composition/matrix", composition_image(reading.composition, title)))
        return out

    def _canvas(self, tag: str, text: str, tokens: Sequence[str], n_panels: int) -> HeatmapCanvas:
        if tag not in self.canvases:
            # One panel under another: the Images tab fits an image to its card's width, where a grid of four would
            # be drawn at half its size, too small to read.
            self.canvases[tag] = HeatmapCanvas(tokens, n_panels, highlight_query=self.highlights.get(text), columns=1)
        return self.canvases[tag]


SOFTWARE = "gptwatch"  # the Software text every PNG written here carries: how a later write knows it


def _has_our_text(head: bytes) -> bool:
    """Whether a PNG's first bytes hold the text Software = gptwatch among the chunks before its pixels, as a PNG
    reader (Pillow's) reads them there, never searched for."""
    try:
        with Image.open(io.BytesIO(head), formats=["PNG"]) as image:
            return image.info.get("Software") == SOFTWARE
    except (OSError, SyntaxError, ValueError, struct.error):  # no PNG, or one cut short before its pixels
        return False


PNG = Kind("a gptwatch heatmap", _has_our_text)


def png_of(image: np.ndarray) -> Callable[[BinaryIO], object]:
    """What writes an RGB array as a PNG carrying the Software text `PNG` knows it by (`files.write_files`)."""
    picture = Image.fromarray(np.asarray(image, dtype=np.uint8))
    info = PngInfo()
    info.add_text("Software", SOFTWARE)
    return lambda fh: picture.save(fh, format="PNG", pnginfo=info)


def composition_image(found: Composition, title: str) -> np.ndarray:
    """The Q-, K- and V-composition of every pair of heads (watch/measure/composition.py), a panel each in the attention
    heatmaps' colours, with every row and column labelled and one colour bar: what the head of a row (every layer
    but the last) writes, read by the head of a column (every layer but the first); blank where the reader is not
    in a later layer."""
    n_layer, n_head = found.scores["K"].shape[:2]
    writers, readers = (n_layer - 1) * n_head, n_layer * n_head
    later = torch.arange(n_head, readers)[None, :] // n_head > torch.arange(writers)[:, None] // n_head
    names = [head_name(layer, head) for layer in range(n_layer) for head in range(n_head)]
    panels = [
        (
            f"{kind}-composition",
            found.scores[kind].reshape(readers, readers)[:writers, n_head:].where(later, float("nan")).numpy(),
            names[:writers],
        )
        for kind in KINDS
    ]
    return grid_image(panels, names[n_head:], title, "composition score", axes=("reads", "writes"))


def patching_map(found: Patching, tokens: Sequence[str]) -> np.ndarray:
    """A pair's patching map: the residual stream patched entering each layer (layer x position) and each head's
    output patched at one position (head x position), as shares of the logit difference brought back."""
    shares = found.shares
    n_layer, n_head = shares["heads"].shape
    panels = [
        ("residual stream entering each layer", shares["residual"].numpy(), [f"L{layer}" for layer in range(n_layer)]),
        (
            "each head's output, one position",
            shares["positions"].reshape(n_layer * n_head, -1).numpy(),
            [head_name(layer, head) for layer in range(n_layer) for head in range(n_head)],
        ),
    ]
    title = "patched from the clean run into the corrupted one: share of the logit difference brought back (· a space)"
    return grid_image(panels, [display_token(t) for t in tokens], title, "share brought back")


def patching_figures(model: torch.nn.Module, sets: ProbeSets, tokenizer: Tokenizer) -> list[tuple[str, np.ndarray]]:
    """The attention page's patching map: (caption, image) of the first of the pairs the watch patches, which the
    caption names, with the share of its logit difference the head that carries most of it brings back; [] without
    pairs."""
    found = first_analysis(model, sets)
    if found is None:
        return []
    pair, decode, about = found.pair, tokenizer.decode, (sets.get(PAIRS) or sets.get(PATHS)).about
    best = found.carriers()
    carried = f"; on this pair {best[0][0]}'s output carries {best[0][1]:.2f} of it" if best else ""
    caption = (
        f"Activation patching on one pair, the first of the watch's {about} (not the sentence above): "
        f"{decode(pair.clean)!r} -> {decode([pair.answer])!r} against {decode(pair.corrupted)!r} -> "
        f"{decode([pair.wrong])!r}, each part of the clean run copied into the corrupted one alone; the share of the "
        f"logit difference it brings back{carried} (python sample.py --patch CLEAN CORRUPTED)"
    )
    return [(caption, patching_map(found, tokenizer.token_strings(pair.clean)))]


def grid_image(
    panels: Sequence[tuple[str, np.ndarray, Sequence[str]]],
    columns: Sequence[str],
    title: str,
    bar_name: str,
    axes: tuple[str, str] | None = None,
) -> np.ndarray:
    """Panels of values [rows, columns] side by side in the attention heatmaps' colours, one colour bar for all: each
    panel (its title, its values, its row labels) over the same column labels (a prompt's tokens, say), with `axes`
    (the columns' name, the rows') written along them. Values are coloured from 0 to 1 (below 0 as 0, above 1 as 1,
    NaN blank); the numbers in the cells are the values themselves."""
    label_font, title_font = font(12), font(14)
    n_cols, n_rows = len(columns), max(values.shape[0] for _, values, _ in panels)
    cell = 30 if max(n_cols, n_rows) <= ANNOTATE_MAX_TOKENS else max(6, min(20, 560 // max(n_cols, n_rows)))
    widest_row = max(int(label_font.getlength(t)) for _, _, rows in panels for t in rows)
    below = max(int(label_font.getlength(t)) for t in columns) + (26 if axes else 12)
    left, bar_w = widest_row + (26 if axes else 12), 80
    panel_w = left + n_cols * cell + 24
    width = max(len(panels) * panel_w + bar_w, int(font(15).getlength(title)) + 20)
    image = Image.new("RGB", (width, max(TOP + TITLE_H + n_rows * cell + below + 8, TOP + TITLE_H + 140)), "white")
    draw = ImageDraw.Draw(image)
    for n, (name, values, rows) in enumerate(panels):
        x0, y0 = n * panel_w + left, TOP + TITLE_H
        image.paste(Image.fromarray(_cells(np.clip(values, 0.0, 1.0), cell)), (x0, y0))
        draw.text((x0 + n_cols * cell // 2, y0 - 6), name, fill=INK, font=title_font, anchor="md")
        _label(image, (x0, y0, left, below, cell), (rows, columns), axes, 12)
        if max(n_cols, n_rows) <= ANNOTATE_MAX_TOKENS:
            shown = zip(*np.nonzero(np.abs(values) >= 0.005), strict=True)
            _write(
                draw,
                (x0, y0, cell),
                {(r, c): f"{values[r, c]:.2f}".replace("0.", ".", 1) for r, c in shown},
                values,
                10,
            )
    colour_bar(image, draw, image.width - bar_w + 12, TOP + TITLE_H, 120, bar_name, None)
    draw.text((image.width // 2, 6), title, fill=INK, font=font(15), anchor="mt")
    return np.asarray(image)
