"""Attention in TensorBoard: heatmaps of chosen sentences, every head's probe
scores as scalars, a table ranking the heads, and the Custom Scalars charts that
put every head on one axis.

The writer is duck-typed (`add_image`, `add_scalar`, `add_text`, `add_custom_scalars`),
so a `torch.utils.tensorboard.SummaryWriter` or anything like it will do.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.nn as nn

from data.probes import within_block
from errors import UserError, warn
from watch.capture import capture_attention
from watch.heatmaps import HeatmapFigure, head_titles
from watch.metrics import ProbeReport, evaluate_probes
from watch.report import head_table

if TYPE_CHECKING:
    from data.probes import AlignedProbe


class TensorBoardWriter:
    """A `SummaryWriter` whose failures never stop the program: the first write that fails (a full
    disk, a removed folder) becomes one warning naming `fix`, and later writes are skipped.

    SummaryWriter writes from a background thread. An error there is raised again by the writer's
    next call, here turned into the warning, and printed as a traceback by the thread itself, which
    `_quiet_writer_threads` keeps quiet."""

    def __init__(self, log_dir: str | Path, fix: str = "free disk space or choose another --log_dir") -> None:
        from torch.utils.tensorboard import SummaryWriter

        _quiet_writer_threads()
        self.log_dir = Path(log_dir)
        self.fix = fix
        self.failed = False
        self._writer = None
        try:
            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        except OSError as exc:
            self._fail(exc)

    def __getattr__(self, name: str) -> Any:
        if self._writer is None:
            return lambda *args, **kwargs: None
        method = getattr(self._writer, name)  # add_scalar, add_figure, add_text, add_hparams, flush, ...

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.failed:
                return None
            try:
                return method(*args, **kwargs)
            except OSError as exc:
                self._fail(exc)
                return None

        return guarded

    def close(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.close()
        except OSError as exc:
            if not self.failed:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        warn(f"cannot write TensorBoard logs to {self.log_dir} ({exc.strerror or exc}); going on without them: "
             f"{self.fix}")


def _quiet_writer_threads() -> None:
    """Keeps TensorBoard's writer thread from printing a traceback for an OSError that its
    writer raises again in the main thread (once per process)."""
    previous = threading.excepthook
    if getattr(previous, "quiet_writer_threads", False):
        return

    def hook(args: Any) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and issubclass(args.exc_type, OSError):
            return
        previous(args)

    hook.quiet_writer_threads = True
    threading.excepthook = hook


def sentence_slug(text: str, max_len: int = 40) -> str:
    """A tag-safe name for a sentence, stable across steps so its images line up in TensorBoard."""
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:max_len].rstrip("_")
    return slug or "sentence"


def _unique_slugs(sentences: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    slugs = []
    for text in sentences:
        slug = sentence_slug(text)
        seen[slug] = seen.get(slug, 0) + 1
        slugs.append(slug if seen[slug] == 1 else f"{slug}_{seen[slug]}")
    return slugs


# TensorBoard's Custom Scalars tab: {category: {chart title: ["Multiline", [tag regexes]]}}. A regex
# matches the start of a tag; one chart draws every matching tag of every run on one axis. The last
# chart takes the training loss (logged every log_interval steps) rather than the validation loss (5
# points in the demo, which smoothing bends out of shape), and every accuracy the probes report.
HEAD_CHARTS = {
    "attention heads": {
        "referent weight, every head": ["Multiline", [r"attention/referent/L\d+H\d+$"]],
        "top-1, every head": ["Multiline", [r"attention/top1/L\d+H\d+$"]],
        "training loss and accuracy": ["Multiline", [r"loss/train$", r"probes/.*accuracy"]],
    },
}


def log_head_charts(writer: Any) -> None:
    """The Custom Scalars layout (`HEAD_CHARTS`): written once, at the start of a run."""
    writer.add_custom_scalars(HEAD_CHARTS)


def log_scores(writer: Any, step: int, report: ProbeReport, *, table: bool = True) -> None:
    """Scalars for every head and the best one, plus (with `table`) the ranking table as Markdown."""
    for name, stats in report.heads.items():
        writer.add_scalar(f"attention/referent/{name}", stats.referent, step)
        writer.add_scalar(f"attention/distractor/{name}", stats.distractor, step)
        writer.add_scalar(f"attention/top1/{name}", stats.top1, step)
    best = report.best
    scalars = {
        "attention/referent/best": best.referent,
        "attention/distractor/best": best.distractor,
        "attention/top1/best": best.top1,
        "attention/referent_no_sink/best": best.referent_no_sink,
        "attention/top1_no_sink/best": best.top1_no_sink,
        "probes/continuation_accuracy": report.continuation.accuracy,
        "probes/logit_diff": report.continuation.logit_diff,
    }
    for tag, value in scalars.items():
        if value is not None:
            writer.add_scalar(tag, value, step)
    if table:
        text = f"step {step}, best head **{best.name}**\n\n{head_table(report, markdown=True)}"
        writer.add_text("attention/heads", text, step)


def log_attention(writer: Any, step: int, model: nn.Module, tokenizer: Any, sentences: Sequence[str],
                  aligned_probes: Sequence[AlignedProbe] | None = None,
                  figures: dict[str, HeatmapFigure] | None = None) -> ProbeReport | None:
    """Log attention heatmaps and probe scores at `step`; returns the probe report (None without probes).

    For each sentence (the explanation sentence first, then perhaps a few probe
    texts): one figure per layer with all its heads, tagged
    `attention/{slug}/layer{l}`, and, when probes name a best head, that head
    alone as `attention/{slug}/best_head`. A sentence that is also a probe's
    text has its pronoun row outlined. Sentences the tokenizer cannot encode
    are skipped with a warning, and so are probes longer than block_size, so
    neither stops training.

    Pass the same `figures` dict at every step of a run: the figures are then
    built once and redrawn with new weights, which is most of the cost saved.
    """
    block_size = model.config.block_size
    probes = within_block(aligned_probes or [], block_size, "probes")
    report = evaluate_probes(model, probes) if probes else None
    if report is not None:
        log_scores(writer, step, report)
    best = report.best if report is not None else None
    pronoun_rows = {item.probe.text: item.pronoun_pos for item in probes}

    kept: list[tuple[str, list[int]]] = []
    for text in sentences:
        try:
            ids = tokenizer.encode(text)
        except UserError as exc:
            warn(f"attention heatmap skipped for {text[:60]!r}: {exc}")
            continue
        if not ids:
            warn(f"attention heatmap skipped for {text[:60]!r}: it has no tokens")
            continue
        if len(ids) > block_size:
            warn(f"attention heatmap of {text[:60]!r} shows only its first {block_size} of "
                          f"{len(ids)} tokens (block_size)")
        kept.append((text, ids[:block_size]))

    captured = capture_attention(model, [ids for _, ids in kept])
    for slug, (text, ids), layers in zip(_unique_slugs([t for t, _ in kept]), kept, captured, strict=True):
        tokens = tokenizer.token_strings(ids)
        row = pronoun_rows.get(text)
        highlight = row if row is not None and row < len(ids) else None
        for layer, pattern in enumerate(layers):
            tag, n_head = f"attention/{slug}/layer{layer}", pattern.shape[0]
            heatmap = _figure(figures, tag, tokens, n_head, highlight)
            heatmap.update(list(pattern), head_titles(layer, n_head, best.name if best else None),
                           f"layer {layer}, step {step}")
            _add(writer, tag, heatmap, step)
        if best is not None:
            tag = f"attention/{slug}/best_head"
            heatmap = _figure(figures, tag, tokens, 1, highlight)
            heatmap.update([layers[best.layer][best.head]],
                           [f"best head {best.name} (referent {best.referent:.2f}), step {step}"])
            _add(writer, tag, heatmap, step)
    return report


def _figure(figures: dict[str, HeatmapFigure] | None, tag: str, tokens: list[str], n_panels: int,
            highlight: int | None) -> HeatmapFigure:
    """The figure kept for `tag` when it still fits these tokens, else a new one (kept if there is a dict)."""
    heatmap = figures.get(tag) if figures is not None else None
    if heatmap is None or heatmap.tokens != tokens or len(heatmap.axes) != n_panels:
        heatmap = HeatmapFigure(tokens, n_panels, highlight_query=highlight)
        if figures is not None:
            figures[tag] = heatmap
    return heatmap


def _add(writer: Any, tag: str, heatmap: HeatmapFigure, step: int) -> None:
    writer.add_image(tag, heatmap.render(), step, dataformats="HWC")
