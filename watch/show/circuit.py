"""The circuit, drawn: which head feeds which (`watch/measure/paths.py`) as a graph, with Pillow. The embeddings at
the bottom, a row of heads per layer above them (each labelled with its type) and each layer's MLP in the middle half
a row higher, as it reads the stream after the attention, the logits at the top; a path is an arrow from its sender to
its receiver, as wide as its share and coloured by the input it goes through. Only paths measured above their spread
are drawn: the others are what a draw of pairs could have made up. The watch draws one at every pass (TensorBoard's
slider plays the circuit forming); `sample.py --patch --paths` and the attention page draw the same picture."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from watch.measure.paths import PATHS, Path
from watch.measure.reading import Reading
from watch.show.heatmaps import INK, font
from watch.show.report import type_labels

COLOURS = {  # by the input a path goes through
    "q": (31, 119, 180),
    "k": (214, 39, 40),
    "v": (44, 160, 44),
    "mlp": (148, 103, 189),
    "logits": (120, 120, 120),
}
WORDS = {"q": "queries", "k": "keys", "v": "values", "mlp": "an MLP's input", "logits": "the logits directly"}
BOX_W, BOX_H, GAP, ROW = 92, 40, 26, 140  # a node's size, the room between two, and between two rows
LEAST = 0.05  # a share below this is not drawn, however clear: it would be a hair across the picture


def circuit_image(found: Sequence[Path], n_layer: int, n_head: int, labels: dict[str, str], title: str) -> np.ndarray:
    """The graph of the paths `found` of a model of `n_layer` x `n_head` heads; `labels` {head: its type's label}."""
    mlps = any(path.input == "mlp" for path in found)
    width = max(GAP + n_head * (BOX_W + GAP), 640)
    left = (width - n_head * (BOX_W + GAP) + GAP) // 2
    height = 90 + ROW * (n_layer + 1) + 60
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    places = {"embeddings": (width // 2, height - 50), "logits": (width // 2, 70)}
    for layer in range(n_layer):
        y = height - 50 - ROW * (layer + 1)
        for head in range(n_head):
            places[f"L{layer}H{head}"] = (left + BOX_W // 2 + head * (BOX_W + GAP), y)
        places[f"MLP{layer}"] = (width // 2, y - ROW // 2)
    drawn = [path for path in found if path.clear and path.share >= LEAST and path.receiver in places]
    for path in sorted(drawn, key=lambda p: p.share):  # the strongest last, on top
        (x0, y0), (x1, y1) = places[path.sender], places[path.receiver]
        start, end = np.array([x0, y0 - BOX_H // 2]), np.array([x1, y1 + BOX_H // 2])
        colour, width_px = COLOURS[path.input], max(1, round(10 * min(path.share, 1.0)))
        draw.line([tuple(start), tuple(end)], fill=colour, width=width_px)
        along = (end - start) / max(np.linalg.norm(end - start), 1.0)
        across = np.array([-along[1], along[0]])
        tip = [end, end - 10 * along + (5 + width_px / 2) * across, end - 10 * along - (5 + width_px / 2) * across]
        draw.polygon([tuple(point) for point in tip], fill=colour)  # the arrowhead: where the path goes in
        label, middle = f"{path.share:.2f}", tuple((start + end) / 2)
        draw.rectangle(draw.textbbox(middle, label, font=font(11), anchor="mm"), fill="white")
        draw.text(middle, label, fill=colour, font=font(11), anchor="mm")
    for name, (x, y) in places.items():
        if name.startswith("MLP") and not mlps:
            continue
        draw.rounded_rectangle([x - BOX_W // 2, y - BOX_H // 2, x + BOX_W // 2, y + BOX_H // 2], 6, "white", INK)
        draw.text((x, y - 7 if name in labels else y), name, fill=INK, font=font(13), anchor="mm")
        if name in labels:
            draw.text((x, y + 10), labels[name], fill=INK, font=font(10), anchor="mm")
    draw.text((width // 2, 8), title, fill=INK, font=font(14), anchor="mt")
    x = GAP
    for words, colour in ((WORDS[kind], colour) for kind, colour in COLOURS.items() if kind != "mlp" or mlps):
        draw.line([(x, 36), (x + 24, 36)], fill=colour, width=4)
        draw.text((x + 30, 36), words, fill=INK, font=font(11), anchor="lm")
        x += 40 + int(font(11).getlength(words))
    if not drawn:
        draw.text((width // 2, height // 2), "no path measured above its spread", fill=INK, font=font(13), anchor="mm")
    return np.asarray(image)


def circuit_of(reading: Reading, title: str) -> np.ndarray | None:
    """The graph of the paths a pass read (None where it read none), its heads labelled with their types."""
    found = reading.results.paths
    if PATHS not in reading.results.counts:  # not read (none read, no sender carrying anything: an empty graph)
        return None
    n_layer, n_head = reading.results.heads["patching"].shape
    return circuit_image(found, n_layer, n_head, type_labels(reading), title)


def circuit_figure(reading: Reading) -> list[tuple[str, np.ndarray]]:
    """The attention page's figure of the paths a pass read ([] without any)."""
    pairs = reading.results.sets.get(PATHS)
    image = circuit_of(reading, "which head feeds which (path patching)")
    if image is None:
        return []
    caption = (
        f"Path patching over {pairs.about}: each arrow a sender head's output, taken from the clean prompts, into one "
        f"receiver alone (a later head's queries, keys or values, an MLP, or the logits), as wide as the share of the "
        f"logit difference it brings back; only paths above their spread (python sample.py --patch FILE --paths)"
    )
    return [(caption, image)]
