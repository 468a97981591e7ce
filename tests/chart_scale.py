"""TensorBoard's y-scale of a Custom Scalars chart, as its web page computes it with its default settings: each line
smoothed (weight 0.6, the debiased moving average), the points of every line of the chart pooled, those below the 5th
or above the 95th percentile left out ("Ignore outliers in chart scaling", on by default), and 5% of what is left
added at each end. A line above the scale's top runs off the chart. The pictures in /work/notes/shots and
docs/tensorboard.md show what this computes.

    python -m tests.chart_scale RUN_FOLDER     # every chart of a run whose highest line runs off its top
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

SMOOTHING = 0.6  # the Custom Scalars tab's default
OUTLIERS = 0.05  # the share of a chart's points at each end that the default scaling leaves out
PADDING = 0.05  # the share of the kept span added at each end
TICKS = 10  # the ticks d3 rounds a scale's ends to


def smoothed(values: list[float]) -> list[float]:
    """A line as TensorBoard draws it, smoothed by a moving average with its bias at the start taken out; a flat line
    is drawn as it is."""
    if len(set(values)) <= 1:
        return list(values)
    out, last = [], 0.0
    for n, value in enumerate(values, start=1):
        last = last * SMOOTHING + (1 - SMOOTHING) * value
        out.append(last / (1 - SMOOTHING**n))
    return out


def quantile(ordered: list[float], p: float) -> float:
    """d3.quantile: linear between the two nearest of the sorted points."""
    at = (len(ordered) - 1) * p
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def nice(low: float, high: float) -> tuple[float, float]:
    """d3's `scale.nice()`: the ends moved out to multiples of a round tick step, until the step settles."""
    step = None
    for _ in range(10):
        size = (high - low) / TICKS
        power = math.floor(math.log10(size))
        error = size / 10**power
        factor = 10 if error >= math.sqrt(50) else 5 if error >= math.sqrt(10) else 2 if error >= math.sqrt(2) else 1
        new = factor * 10**power if power >= 0 else -(10**-power) / factor
        if new == step:
            break
        if new > 0:
            low, high = math.floor(low / new) * new, math.ceil(high / new) * new
        else:
            low, high = math.ceil(low * new) / new, math.floor(high * new) / new
        step = new
    return low, high


def scale(lines: list[list[float]]) -> tuple[float, float]:
    """The (bottom, top) of a chart of these lines, as its default scaling draws it."""
    points = sorted(v for line in lines for v in smoothed(line))
    low, high = quantile(points, OUTLIERS), quantile(points, 1 - OUTLIERS)
    kept = [v for v in points if low <= v <= high] or [0.0, 1.0]  # none kept: TensorBoard's scale is 0 to 1
    if kept[0] == kept[-1]:  # one value: TensorBoard's scale around it
        return (-1.0, 1.0) if kept[0] == 0 else (2 * kept[0], 0.0) if kept[0] < 0 else (0.0, 2 * kept[0])
    pad = (kept[-1] - kept[0] + sys.float_info.epsilon) * PADDING
    return nice(kept[0] - pad, kept[-1] + pad)


def charts_of(folder: Path) -> dict[str, list[list[float]]]:
    """Every Custom Scalars chart of a run folder (its own event file and its heads' runs), with the values of each
    line it draws."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    runs = [folder, *sorted(p for p in folder.iterdir() if p.is_dir())]
    loaded = [EventAccumulator(str(run), size_guidance={"scalars": 0, "tensors": 0}).Reload() for run in runs]
    (stored,) = loaded[0].Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(stored.tensor_proto.string_val[0])
    charts = {}
    for category in layout.category:
        for chart in category.chart:
            charts[chart.title] = [
                [event.value for event in run.Scalars(tag)]
                for run in loaded
                for tag in run.Tags()["scalars"]
                if any(re.match(rx, tag) for rx in chart.multiline.tag)
            ]
    return charts


def clipped(folder: Path) -> dict[str, float]:
    """The charts of a run whose highest smoothed line runs above the default scale's top, and by how much."""
    found = {}
    for title, lines in charts_of(folder).items():
        lines = [line for line in lines if line]
        if lines:
            top = max(max(smoothed(line)) for line in lines)
            over = top - scale(lines)[1]
            if over > 1e-9:
                found[title] = over
    return found


if __name__ == "__main__":
    for title, over in clipped(Path(sys.argv[1])).items():
        print(f"{over:9.4f} above the top: {title}")
