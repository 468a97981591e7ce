"""An offline attention page: one self-contained HTML file to explore where each head of a layer looks from each
token (its own hint says how to use it). Everything is inline (CSS, script, and the weights as JSON), and a
Content-Security-Policy forbids loading anything else, so the file opens from disk with no network.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from common.errors import UserError
from common.files import Kind, write_files
from watch.measure.composition import reads_from
from watch.measure.heads import default_query, display_token, focused_head, head_name
from watch.measure.headtypes import RULE, TYPES
from watch.measure.probesets import ProbeSets
from watch.measure.reading import Reading
from watch.show.circuit import circuit_figure
from watch.show.heatmaps import as_array, patching_figures
from watch.show.report import type_labels

DATA_ID = "attention-data"
# The first line of every page written here, put there by `write_page`: what a later write knows a page by.
PAGE = Kind.starting("an attention page", b"<!-- written by gptwatch: an attention page -->\n")
# The page's markup, style and script, with {title}, {data_id}, {data}, {legend} and {figures} to fill in.
TEMPLATE = Path(__file__).with_name("page.html")


@dataclass
class SentenceView:
    """One sentence on the page: its tokens, every layer's pattern [head, query_pos, key_pos], the token selected
    when the page opens (by default the last pronoun, else the last token), and the head to mark (layer, head)
    with why (by default the most focused one from that query)."""

    text: str
    tokens: list[str]
    patterns: list[torch.Tensor]
    query: int | None = None
    best: tuple[int, int] | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        self.tokens, self.patterns = list(self.tokens), list(self.patterns)
        if not self.tokens or any(p.shape[-1] != len(self.tokens) for p in self.patterns):
            raise ValueError(
                f"patterns of shape {[tuple(p.shape) for p in self.patterns]} do not fit {len(self.tokens)} tokens"
            )
        if self.query is None:
            self.query = default_query(self.tokens)
        if self.best is None:
            self.best = focused_head(self.patterns, self.query)
            token = display_token(self.tokens[self.query], space_mark="")
            self.note = self.note or f"most focused head from {token!r}"
        self.note = self.note or "best head"


def _float32_rows(pattern: torch.Tensor) -> list[list[list[float]]]:
    """[head][query_pos] -> the weights on keys 0..query_pos (the rest is the masked future),
    each the shortest decimal that reads back as the same float32."""
    values = as_array(pattern)
    if not np.isfinite(values).all():  # weights that overflow give nan attention, which JSON cannot hold
        raise UserError(
            "the model's attention weights are not finite numbers (nan or inf): its weights overflow; "
            "use a checkpoint from before the run diverged"
        )
    return [
        [[float(text) for text in values[head, q, : q + 1].astype(str)] for q in range(values.shape[1])]
        for head in range(values.shape[0])
    ]


def attention_page(
    views: Sequence[SentenceView],
    title: str,
    labels: dict[str, str] | None = None,
    reads: dict | None = None,
    figures: Sequence[tuple[str, np.ndarray]] = (),
) -> str:
    """The page as one HTML string. It embeds as JSON each sentence's weights[layer][head][query_pos][key_pos <=
    query_pos], the heads' types by name (`labels`: "L1H3": "induction") and the heads each head reads from by
    composition (`reads`: `watch.measure.composition.reads_from`), shown for a selected head; then `figures`, each
    (caption, RGB image) shown below as an inline PNG (the patching map)."""
    if not views:
        raise ValueError("an attention page needs at least one sentence")
    sentences = [
        {
            "text": view.text,
            "tokens": [display_token(t, space_mark="") for t in view.tokens],
            "query": view.query,
            "best": {"layer": view.best[0], "head": view.best[1], "name": head_name(*view.best), "note": view.note},
            "weights": [_float32_rows(pattern) for pattern in view.patterns],
        }
        for view in views
    ]
    data = {"title": title, "sentences": sentences, "types": dict(labels or {}), "reads": dict(reads or {})}
    data = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    # Inside <script>, "</script>" or "<!--" in a token must not end the block.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    values = {"title": html.escape(title), "data_id": DATA_ID, "data": data, "legend": html.escape(legend(labels))}
    values["figures"] = "".join(_figure(caption, image) for caption, image in figures)
    return re.sub(
        r"\{(title|data_id|data|legend|figures)\}",
        lambda match: values[match.group(1)],
        TEMPLATE.read_text(encoding="utf-8"),
    )


def reading_page(
    views: Sequence[SentenceView], title: str, reading: Reading, model: torch.nn.Module, sets: ProbeSets, tokenizer
) -> str:
    """The page of a pass's `reading` of `model` on `sets`: its heads' types, what each reads from by composition,
    the patching map of the first of the pairs and the circuit the paths draw."""
    figures = patching_figures(model, sets, tokenizer) + circuit_figure(reading)
    reads = reads_from(reading.composition, reading.untrained.composition)
    return attention_page(views, title, type_labels(reading), reads, figures)


def _figure(caption: str, image: np.ndarray) -> str:
    """An RGB image as a <figure> holding it as an inline PNG (the page loads nothing from anywhere else)."""
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buffer, format="PNG")
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    text = html.escape(caption)
    return f'<figure><img alt="{text}" src="data:image/png;base64,{encoded}"><figcaption>{text}</figcaption></figure>'


def legend(labels: dict[str, str] | None) -> str:
    """What the types beside the heads mean, and the rule that gives a head one, in a sentence or two."""
    shown = [head_type for head_type in TYPES.values() if head_type.label in set((labels or {}).values())]
    if not shown:
        return (
            f"No head has a type yet: {RULE}. python sample.py --heads prints every head's scores, and which "
            f"heads are close."
        )
    meanings = "; ".join(f"{head_type.label}: {head_type.meaning}" for head_type in shown)
    return f"Types: {meanings}. {RULE[0].upper()}{RULE[1:]}."


def write_page(path: str | Path, page: str) -> Path:
    """Writes the page (parent folders made) under its first line `PAGE`, over nothing or a page written earlier;
    a path that cannot be written is a UserError."""
    path = Path(path)
    return write_files({path: lambda fh: fh.write(page.encode("utf-8"))}, PAGE, f"the attention page {path}", "path")[0]
