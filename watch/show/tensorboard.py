"""What a run writes to TensorBoard: its own scalars (the loss, the learning rate, the throughput), and what a watch
pass found: every head's scores as scalars, the tables as text, the heatmaps `watch/show/heatmaps.py` drew, and the
Custom Scalars charts that put every head on one axis. Nothing here runs the model: it writes what a pass's `Reading`
(`watch/measure/reading.py`) says. The writer is duck-typed, so a `torch.utils.tensorboard.SummaryWriter` will do
where no score of a head is written (`TensorBoardWriter.head`).
"""

from __future__ import annotations

import secrets
import shlex
import struct
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.cli import markdown_literal
from common.errors import warn
from common.files import write_error
from watch.measure.composition import KINDS
from watch.measure.heads import head_name
from watch.measure.headtypes import BROAD, TYPE_MIN, TYPE_SETS, TYPES
from watch.measure.patching import PAIRS
from watch.measure.paths import PATHS
from watch.measure.probesets import ProbeSets
from watch.measure.proofs import AblationResult
from watch.measure.reading import PROBE_KINDS, Reading
from watch.show.circuit import circuit_of
from watch.show.kinds import SHOWN, shown
from watch.show.report import before_table, changes_line, head_table, type_legend, type_lines, type_table


class TensorBoardWriter:
    """A `SummaryWriter` whose failures never stop the program: the first write that fails (a full
    disk, a removed folder) becomes one warning naming `fix`, and later writes are skipped.

    SummaryWriter writes from a background thread. An error there is raised again by the writer's
    next call, here turned into the warning, and printed as a traceback by the thread itself, which
    `_quiet_writer_threads` keeps quiet.

    Its event file has a name nobody can guess (TensorBoard's own is the time, host and pid), and the
    hparams go into that file too, so no link planted in the run folder is ever written through."""

    def __init__(
        self,
        log_dir: str | Path,
        fix: str = "free disk space or choose another --log_dir",
        parent: TensorBoardWriter | None = None,
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        _quiet_writer_threads()
        self.log_dir = Path(log_dir)
        self.fix = fix
        self.failed = False
        self._parent = parent
        self._heads: dict[str, TensorBoardWriter] = {}
        self._scalars: list[tuple[str, float]] = []  # (tag, value) of step `_scalar_step`, not yet written
        self._scalar_step: int | None = None
        self._writer = None
        try:
            self._writer = SummaryWriter(log_dir=str(self.log_dir), filename_suffix=f".{secrets.token_hex(8)}")
        except OSError as exc:
            self._fail(exc)

    def head(self, name: str) -> TensorBoardWriter:
        """The writer of head `name`'s own run, a folder inside this run's (RUN/L0H0). TensorBoard colours and
        names the lines of a chart by run, so a chart of one score of every head (`attention/referent`, whose
        lines are the head runs) gives each head its own colour and legend name."""
        if self.failed or self._writer is None:
            return self  # writes nothing, and opens nothing more on a disk that already failed
        if name not in self._heads:
            self._heads[name] = TensorBoardWriter(self.log_dir / name, self.fix, parent=self)
        return self._heads[name]

    def add_scalar(self, tag: str, value: float, global_step: int | None = None) -> None:
        """As SummaryWriter's, but a step's scalars go in as one event when the step changes or something else is
        written: a watch pass logs hundreds, and an event each took a third of what a quick pass cost."""
        if self._scalars and global_step != self._scalar_step:
            self._write_scalars()
        self._scalar_step = global_step
        self._scalars.append((tag, float(value)))

    def _write_scalars(self) -> None:
        """The kept scalars as one event; none kept (`_guard` calls this before every write), none written."""
        scalars, self._scalars = self._scalars, []
        if scalars and self._writer is not None and not self.failed:
            from tensorboard.compat.proto.summary_pb2 import Summary

            values = [Summary.Value(tag=tag, simple_value=value) for tag, value in scalars]
            self._guard(lambda: self._writer.file_writer.add_summary(Summary(value=values), self._scalar_step))

    def flush(self) -> None:
        for writer in (self, *self._heads.values()):
            writer._guard(lambda w=writer: w._writer.flush())

    def add_hparams(self, hparam_dict: dict, metric_dict: dict) -> None:
        """The run's settings and final metrics, for the HParams tab, in this run's own event file (torch's
        `add_hparams` would open a second one, under a name that can be guessed)."""
        from torch.utils.tensorboard.summary import hparams

        def write() -> None:
            for summary in hparams(hparam_dict, metric_dict):
                self._writer.file_writer.add_summary(summary)
            for name, value in metric_dict.items():
                self._writer.add_scalar(name, value)

        self._guard(write)

    def add_image(self, tag: str, image: Any, global_step: int | None = None, dataformats: str = "CHW") -> None:
        """An image, as SummaryWriter's `add_image` takes it. An RGB array of bytes [height, width, 3] (what
        `watch/show/heatmaps.py` draws) goes in as `png_bytes` makes it, without SummaryWriter's round trip through
        float32 and its default compression: those took a third of each evaluation of the default demo."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        def write_png() -> None:
            height, width, _ = image.shape
            picture = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=png_bytes(image))
            self._writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=picture)]), global_step)

        ours = dataformats == "HWC" and getattr(image, "dtype", None) == np.uint8 and image.shape[2:] == (3,)
        self._guard(
            write_png if ours else lambda: self._writer.add_image(tag, image, global_step, dataformats=dataformats)
        )

    def __getattr__(self, name: str) -> Any:
        """The writer's method `name` (add_scalar, add_text, add_custom_scalars, ...), guarded (`_guard`)."""
        method = getattr(self._writer, name) if self._writer is not None else None
        return lambda *args, **kwargs: self._guard(lambda: method(*args, **kwargs))

    def _guard(self, write: Any) -> None:
        """`write()`, its OSError turned into the one warning; nothing without a writer or after a failure."""
        if self._writer is None or self.failed:
            return
        self._write_scalars()  # a step's scalars still kept go first: everything in the order written
        try:
            write()
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        for head in self._heads.values():
            head.close()
        if self._writer is None:
            return
        self._write_scalars()
        try:
            self._writer.close()
        except OSError as exc:
            if not self.failed:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        if self._parent is not None:  # one warning for the run and its heads' runs
            if self._parent.failed:
                return
            self._parent.failed = True
        warn(
            f"cannot write TensorBoard logs to {self.log_dir} ({write_error(exc, self.log_dir)}); going on without "
            f"them: {self.fix}"
        )


def png_bytes(image: np.ndarray) -> bytes:
    """An RGB array of bytes [height, width, 3] as a PNG, each row as its difference from the one above (PNG's "Up"
    filter) at zlib's fastest: as small as Pillow's fastest for a heatmap, and 3x quicker (Pillow tries 5 filters)."""
    height, width, _ = image.shape
    pixels = image.reshape(height, 3 * width)
    # Written into one buffer: a heatmap is megabytes, and each fresh temporary of that size costs its page faults.
    rows = np.empty((height, 1 + 3 * width), dtype=np.uint8)
    rows[:, 0] = 2  # each row: its filter (2, Up), bytes
    rows[0, 1:] = pixels[0]
    np.subtract(pixels[1:], pixels[:-1], out=rows[1:, 1:])  # uint8: wraps at 256, as PNG's

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b"")


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


def tensorboard_command(log_dir: str | Path) -> str:
    """The command that opens `log_dir` in TensorBoard, as every hint prints it: with as many images and texts per tag
    as a run logs (TensorBoard keeps 10 otherwise). A run's own folder opens that run alone, its heads a colour each."""
    return f"tensorboard --logdir {shlex.quote(str(log_dir))} --samples_per_plugin=images=200,text=200"


# --- what a run writes -----------------------------------------------------------------------------------


def log_step(writer: Any, step: int, loss: float, lr: float, grad_norm: float | None, tokens_per_sec: float) -> None:
    """The run's own scalars every log_interval steps: the training loss, the learning rate, the gradient norm before
    clipping (None, and none written, without grad_clip) and the throughput."""
    writer.add_scalar("loss/train", loss, step)
    writer.add_scalar("lr", lr, step)
    if grad_norm is not None:
        writer.add_scalar("grad_norm", grad_norm, step)
    writer.add_scalar("throughput/tokens_per_sec", tokens_per_sec, step)


def log_losses(writer: Any, step: int, val_loss: float, train_loss: float) -> None:
    """An evaluation's losses, on the val split and on the training split."""
    writer.add_scalar("loss/val", val_loss, step)
    writer.add_scalar("loss/train_eval", train_loss, step)


def log_hparams(writer: Any, cfg: Any, result: Any) -> None:
    """The run's settings `cfg` (a `TrainConfig`) beside what it reached (`result`, a `FitResult`: the best val loss,
    the wall time, the last training loss and what the callbacks added), for the HParams tab."""
    hparams = {key: value for key, value in cfg.to_dict().items() if isinstance(value, (int, float, str, bool))}
    metrics = {"hparam/best_val_loss": result.best_val_loss, "hparam/wall_seconds": result.seconds, **result.metrics}
    if result.evaluations:
        metrics["hparam/final_train_loss"] = result.evaluations[-1].train_loss
    writer.add_hparams(hparams, metrics)


# A fine-tune: each type's best head now beside the best of the model before fine-tuning (`Reading.before`).
BEFORE_TAG = "before_fine_tuning"  # before_fine_tuning/{type} in each head's run, .../best, the table


def _drawn_in(category: str) -> dict[str, list[str]]:
    """The charts the kinds of probe set draw in `category` (`watch.show.kinds.Shown.charts`), in the registry's
    order."""
    kinds = [shown for shown in SHOWN.values() if shown.category == category]
    return {title: tags for shown in kinds for title, tags in shown.charts.items()}


# TensorBoard's Custom Scalars tab: {category: {chart title: [tag regexes]}}. A regex matches the start of a tag; one
# chart draws every matching tag of every run on one axis, a colour per run: a score of every head is one tag written
# in each head's own run (`TensorBoardWriter.head`). A chart whose title ends in EVERY_HEAD is drawn once per group of
# heads (`chart_groups`), so that no two of its lines share a colour; `chart_layout` says which.
EVERY_HEAD = ", every head"
CHARTS = {
    "attention heads": _drawn_in("attention heads"),
    "agreement": _drawn_in("agreement"),
    "head types": {
        **{f"{kind.replace('_', '-')}{EVERY_HEAD}": [rf"heads/{kind}$", r"reference/type_needs$"] for kind in TYPES},
        f"{BROAD}{EVERY_HEAD}": [rf"heads/{BROAD}$"],
        **_drawn_in("head types"),
    },
    "patching": _drawn_in("patching"),  # which head carries the answer, over training
    # How much each head reads what an earlier one writes (watch/measure/composition.py): per kind the best pair's
    # score beside the untrained model's best, a flat line to read the rise against; then (`_composition_charts`) a
    # chart per kind and reading head, a line per earlier head.
    "composition": {  # a chart per kind: both its lines are the run's own, so they share its colour
        f"{kind}-composition, the best pair and the untrained model's": [rf"composition/{kind}/(best|untrained_best)$"]
        for kind in KINDS
    },
    "fine-tuning": {
        f"{kind.replace('_', '-')}: best head now and before fine-tuning": [
            rf"heads/{kind}/best$",
            rf"{BEFORE_TAG}/{kind}/best$",
        ]
        for kind in TYPES
    },
}
# Flat lines of the run's own, written at every pass, that charts draw beside their own lines, so that TensorBoard's
# default outlier scaling, which leaves the top and bottom 5% of a chart's points out of its scale, never clips the line
# that climbs highest: 1, the most a share can be, on every chart of shares (all but those of NOT_SHARES, in nats);
# and where a chart names one, 0, the score a type needs at least (`watch.measure.headtypes.RULE`) or the untrained
# model's held-out loss (`log_scores`).
REFERENCES = {"reference/all": 1.0, "reference/none": 0.0, "reference/type_needs": TYPE_MIN}
NOT_SHARES = ("loss/", "heads/in_context")

# TensorBoard colours runs from a palette of seven, in the order the runs started, and a head's run starts when the
# first pass writes its scores, heads in order. So any seven heads that follow each other have seven colours: a layer,
# or a run of seven heads of a wider layer.
PALETTE = 7
# Beyond this many heads, a composition chart per reading head and group of earlier heads is more charts than anyone
# reads; the scores are still in the Scalars tab.
COMPOSITION_CHARTS_MAX_HEADS = 16


def chart_group(layer: int, head: int, n_head: int) -> str:
    """The group a head's lines are charted with, which ends the tags of its scores: its layer ("L0"), or in a layer of
    more than PALETTE heads its run of up to PALETTE ("L0H7-11")."""
    if n_head <= PALETTE:
        return f"L{layer}"
    first = head - head % PALETTE
    return f"L{layer}H{first}-{min(first + PALETTE, n_head) - 1}"


def chart_groups(n_layer: int, n_head: int) -> dict[str, str]:
    """Every group of heads of a model, in order, with its words: {"L0": "layer 0", ...} or, in layers wider than
    PALETTE, {"L0H0-6": "layer 0, heads 0-6", ...}."""
    groups = {}
    for layer in range(n_layer):
        for head in range(0, n_head, PALETTE):
            group = chart_group(layer, head, n_head)
            heads = group.partition("H")[2]
            groups[group] = f"layer {layer}" + (f", heads {heads}" if heads else "")
    return groups


def chart_layout(sets: ProbeSets, n_layer: int, n_head: int, *, fine_tuning: bool = False) -> dict:
    """The Custom Scalars layout of a run of `n_layer` x `n_head` heads that reads `sets`: every category that one of
    its probe sets draws in (the head types' where a type is measured), with all its charts, each chart of every head
    drawn once per group of heads; the composition's with two layers or more; with `fine_tuning` each type beside the
    model before fine-tuning. {category: {title: ["Multiline", tag regexes]}}"""
    drawn = {SHOWN[name].category for name in sets.sets if name in SHOWN}
    if any(kind in sets.sets for kind in TYPE_SETS):
        drawn |= {"head types", *(["fine-tuning"] if fine_tuning else [])}
    if n_layer > 1:
        drawn.add("composition")
    groups = chart_groups(n_layer, n_head)
    heads = [(layer, head_name(layer, head)) for layer in range(1, n_layer) for head in range(n_head)]
    readers = {  # what each head, MLP or the logits read from each earlier head: a chart each, a line per head
        "composition": {
            f"{kind}-composition into {name}": (f"composition/{kind}/into_{name}", layer - 1)
            for kind in KINDS
            for layer, name in heads
        },
        "patching": {
            **{
                f"path through the {words} of {name}": (f"paths/{kind}/into_{name}", layer - 1)
                for kind, words in PATH_INPUTS.items()
                for layer, name in heads
            },
            **{f"path into MLP{layer}'s input": (f"paths/mlp/into_MLP{layer}", layer) for layer in range(n_layer)},
            "path straight to the logits": ("paths/logits", n_layer - 1),
        }
        if PATHS in sets.sets
        else {},
    }
    layout: dict[str, dict[str, list[str]]] = {}
    for category, charts in CHARTS.items():
        if category not in drawn:
            continue
        found = layout[category] = {}
        for title, tags in charts.items():
            if not title.endswith(EVERY_HEAD):
                found[title] = list(tags)
                continue
            for group, words in groups.items():  # the tag in each head's run ends in its group (`_log_heads`)
                ends = [tag if tag.startswith("reference/") else f"{tag.removesuffix('$')}/{group}$" for tag in tags]
                found[f"{title.removesuffix(EVERY_HEAD)}, {words}"] = ends
        if n_layer * n_head <= COMPOSITION_CHARTS_MAX_HEADS:
            for title, (tag, last) in readers.get(category, {}).items():  # a chart per group of earlier heads
                earlier = [group for group in groups if int(group[1:].partition("H")[0]) <= last]
                for group in earlier:
                    found[title + ("" if len(earlier) == 1 else f", from {groups[group]}")] = [rf"{tag}/{group}$"]
    pairs = sets.get(PATHS) or sets.get(PAIRS)  # the patching category says what it was measured on
    return {
        f"{category}, over {pairs.about}" if category == "patching" else category: {
            title: ["Multiline", tags + ([] if any(t.startswith(NOT_SHARES) for t in tags) else [r"reference/all$"])]
            for title, tags in charts.items()
        }
        for category, charts in layout.items()
    }


PATH_INPUTS = {"q": "queries", "k": "keys", "v": "values"}


def log_charts(writer: Any, sets: ProbeSets, n_layer: int, n_head: int, *, fine_tuning: bool = False) -> None:
    """The Custom Scalars layout (`chart_layout`), written once, at the start of a run."""
    layout = chart_layout(sets, n_layer, n_head, fine_tuning=fine_tuning)
    if layout:
        writer.add_custom_scalars(layout)


def log_evaluation(
    writer: Any,
    step: int,
    reading: Reading,
    ablations: Sequence[AblationResult],
    images: Sequence[tuple[str, np.ndarray]],
) -> None:
    """Everything an evaluation shows: the scores, what removing the agreement heads costs, the heatmaps, the tables
    as Markdown in the Text tab, and the scores of the model before fine-tuning."""
    log_scores(writer, step, reading)
    log_agreement(writer, step, reading, ablations)
    fine_tune = reading.before is not None and reading.types
    for kind, values in reading.before.type_scores.items() if fine_tune else ():  # a line to read each score against
        _log_heads(writer, step, f"{BEFORE_TAG}/{kind}", values, best=True)
    for tag, image in images:
        writer.add_image(tag, image, step, dataformats="HWC")
    # The tables as the terminal prints them, in code blocks: the Text tab gives a Markdown table's columns equal
    # widths and breaks a cell anywhere to fit ("L0H / 0"), where a code block keeps each line whole.
    report = reading.pronouns
    if report is not None:
        table, summary, legend = head_table(report).rsplit("\n", 2)  # the table's lines, then two lines of words
        text = f"step {step}, best head **{report.best.name}**\n\n{markdown_literal(table)}\n\n{summary}\n\n{legend}"
        writer.add_text("attention/heads", text, step)
    if reading.types:
        lines = (type_legend(reading) + "\n" + type_lines(reading)).replace("\n", "  \n")  # Markdown line breaks
        writer.add_text("heads/types", f"step {step}\n\n{markdown_literal(type_table(reading))}\n\n{lines}", step)
    if fine_tune:
        table = before_table(reading)
        text = f"step {step}: {changes_line(reading)}" + (f"\n\n{markdown_literal(table)}" if table else "")
        writer.add_text(f"heads/{BEFORE_TAG}", text, step)


def log_scores(writer: Any, step: int, reading: Reading) -> None:
    """Every head's type scores, each in the head's own run, with the best in the run's; what each kind of probe set
    gives (`ProbeKind.numbers`, as the views show them; of each type read on it with a spread, heads/{type}_spread and
    heads/{type}/best_spread; and `Shown.scalars`: watch/show/kinds.py); the flat lines the
    charts draw beside theirs (`REFERENCES`); and every pair's Q-, K- and
    V-composition, in the earlier head's run (composition/K/into_L1H3/L0 in run L0H1: L0H1's output as L1H3's keys
    read it), with per kind the best pair's score beside the untrained model's best."""
    for kind, values in reading.type_scores.items():
        _log_heads(writer, step, f"heads/{kind}", values, best=True)
    if reading.offsets is not None:
        _log_heads(writer, step, "heads/positional_offset", reading.offsets)
    scalars, numbers = dict(REFERENCES), shown(reading.results.numbers)
    if reading.untrained is not None:
        scalars["reference/untrained_loss"] = reading.untrained.results.numbers.get("text_loss")
    for kind in PROBE_KINDS.values():
        scalars.update({f"heads/{name}": numbers.get(name) for name in kind.numbers})
        if kind.name not in reading.results.sets.sets:  # the kinds the pass read
            continue
        for name in (name for name, t in TYPES.items() if t.probe_set == kind.name and reading.results.best(name)):
            # Beside a type's score, its spread where it has one: every head's and the best head's.
            scalars[f"heads/{name}_spread"] = reading.results.heads.get(f"{name}_spread")
            scalars[f"heads/{name}/best_spread"] = reading.results.best_spread(name)
        scalars.update(SHOWN[kind.name].scalars(reading))
    found = reading.composition
    untrained = reading.untrained.composition if reading.untrained is not None and found is not None else None
    for kind in KINDS if found is not None else ():
        scores = found.scores[kind]  # [layer_from, head_from, layer_to, head_to]
        for layer, head in np.ndindex(scores.shape[2:]):
            if layer:  # what a head of layer 1 or later reads from each earlier head, in the earlier head's run
                _log_heads(
                    writer, step, f"composition/{kind}/into_{head_name(layer, head)}", scores[:layer, :, layer, head]
                )
        scalars[f"composition/{kind}/best"] = max(found.pairs[kind].values())
        if untrained is not None:
            scalars[f"composition/{kind}/untrained_best"] = max(untrained.pairs[kind].values())
    for tag, value in scalars.items():
        if isinstance(value, torch.Tensor):  # [layer, head]: a scalar in each head's run
            _log_heads(writer, step, tag, value)
        elif value is not None:
            writer.add_scalar(tag, value, step)
    circuit = circuit_of(reading, f"which head feeds which at step {step} (path patching)")
    if circuit is not None:  # at every pass: the Images tab's slider plays the circuit forming
        writer.add_image("paths/circuit", circuit, step, dataformats="HWC")


def agreement_figures(reading: Reading, ablations: Sequence[AblationResult]) -> dict[str, float]:
    """Agreement, the ref > dis of the head most selective at the pronoun, and what removing the heads that carry
    agreement (`ablations`) costs each: the HParams' figures, hparam/NAME, and TensorBoard's, probes/NAME; {} without
    agreement contexts."""
    a = reading.agreement
    if a is None:
        return {}
    out = {"agreement_accuracy": a.accuracy, "agreement_share": a.share}
    out.update({f"agreement_accuracy_{m}_mention": v for m, v in a.by_mention.items()})
    if reading.pronouns is not None:
        out["most_selective_top1"] = reading.pronouns.most_selective.top1
    for ab in ablations:
        out[f"agreement_accuracy_without_{ab.kind}"] = ab.reading.agreement.accuracy
        if ab.best_top1_left is not None:
            out[f"most_selective_top1_without_{ab.kind}"] = ab.best_top1_left
    return out


def log_agreement(writer: Any, step: int, reading: Reading, ablations: Sequence[AblationResult]) -> None:
    """The agreement figures a pass's own scalars do not hold (`agreement_figures`: the most selective head's, what
    removing heads costs) as scalars probes/NAME, and the removed heads as text."""
    for name, value in agreement_figures(reading, ablations).items():
        if name not in reading.results.numbers:  # those the pass read are written with its scalars
            writer.add_scalar(f"probes/{name}", value, step)
    if ablations:
        text = "; ".join(f"{ab.kind.replace('_', ' ')}: {', '.join(ab.heads)}" for ab in ablations)
        writer.add_text("probes/ablated_heads", f"step {step}, ablated: {text}", step)


def _log_heads(writer: Any, step: int, tag: str, values: torch.Tensor, *, best: bool = False) -> None:
    """A scalar per head from [layer, head] values: {tag}/{group} in each head's own run (`TensorBoardWriter.head`;
    the group, `chart_group`, is what its chart selects), and {tag}/best, the highest, in the run's."""
    missing = values.isnan()  # not measured at this pass: a gap in its line, not a point
    for layer in range(values.shape[0]):
        for head in range(values.shape[1]):
            if missing[layer, head]:
                continue
            group = chart_group(layer, head, values.shape[1])
            writer.head(head_name(layer, head)).add_scalar(f"{tag}/{group}", values[layer, head].item(), step)
    if best and not missing.all():
        writer.add_scalar(f"{tag}/best", values[~missing].max().item(), step)
