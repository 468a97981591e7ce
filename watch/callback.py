"""Attention watching as a training callback.

`AttentionWatch` has the hooks a `trainer.Trainer` calls (`on_fit_start`, `on_evaluate`,
`on_watch`, `on_fit_end`), so training plugs it in without the trainer knowing about
attention, and this package needs nothing from the trainer: it reads only `trainer.model`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.probes import AlignedProbe, align, align_usable, load_probes, within_block
from data.tokenizer import Tokenizer, TokenizerError
from errors import UserError, warn
from watch.capture import capture_attention
from watch.heatmaps import HeatmapFigure
from watch.metrics import ablation_effect, evaluate_probes
from watch.page import SentenceView, attention_page, sentence_view, write_page
from watch.report import ablation_line, head_table, last_pronoun_pos, top_attended
from watch.tensorboard import log_attention, log_head_charts, log_scores


def aligned_probes(path: str | Path, tokenizer: Tokenizer) -> list[AlignedProbe]:
    """The probes of a JSONL file in this tokenizer's positions; those using tokens outside its
    vocabulary cannot be scored and are left out, with a warning."""
    return align_usable(load_probes(path), align, tokenizer, f"probes in {path}")


class AttentionWatch:
    """At each evaluation: heatmaps of the watched sentences and every head's probe scores, in
    TensorBoard; between evaluations (`on_watch`), the probe scores alone, a cheap dense curve;
    at the start, the Custom Scalars charts that put every head on one axis. At the end of a
    completed run: the head report on the terminal (the heads ranked, the effect of ablating
    the best one, where each watched sentence's pronoun looks), its numbers for TensorBoard's
    HParams, and the watched sentences as an offline attention page at `page`, if given."""

    def __init__(self, writer: Any, tokenizer: Tokenizer, sentences: Sequence[str] = (),
                 probes: Sequence[AlignedProbe] = (), *, page: str | Path | None = None) -> None:
        self.writer = writer
        self.tokenizer = tokenizer
        self.sentences: list[str] = []
        for sentence in sentences:
            try:
                tokenizer.encode(sentence)
                self.sentences.append(sentence)
            except TokenizerError as exc:
                warn(f"not watching {sentence!r}: {exc}")
        self.probes = list(probes)
        self.page = Path(page) if page is not None else None
        self.figures: dict[str, HeatmapFigure] = {}  # built once, redrawn with new weights at each evaluation

    @property
    def active(self) -> bool:
        return bool(self.sentences or self.probes)

    def on_fit_start(self, trainer: Any) -> None:
        """Probes longer than the model's block_size cannot be scored: left out once, with a warning."""
        self.probes = within_block(self.probes, trainer.model.config.block_size, "probes")
        if self.probes:
            log_head_charts(self.writer)

    def on_evaluate(self, trainer: Any, evaluation: Any) -> None:
        if self.active:
            log_attention(self.writer, evaluation.step, trainer.model, self.tokenizer, self.sentences,
                          self.probes or None, figures=self.figures)

    def on_watch(self, trainer: Any, step: int) -> None:
        if self.probes:
            log_scores(self.writer, step, evaluate_probes(trainer.model, self.probes), table=False)

    def on_fit_end(self, trainer: Any, result: Any) -> None:
        if not (result.completed and self.active):
            return
        metrics, views = self.report(trainer.model)
        result.metrics.update(metrics)
        if self.page is not None and views:
            try:
                result.files["attention page"] = write_page(
                    self.page, attention_page(views, f"Attention at step {result.step}: {self.page.parent}"))
            except UserError as exc:
                warn(f"no attention page: {exc}")

    def report(self, model: Any) -> tuple[dict[str, float], list[SentenceView]]:
        """Prints the head report; returns its numbers, named for TensorBoard's HParams, and the
        watched sentences with their patterns, for the attention page."""
        metrics: dict[str, float] = {}
        best = None
        if self.probes:
            report = evaluate_probes(model, self.probes)
            best = report.best
            print(f"\nattention on {len(self.probes)} held-out probes (pronoun -> referent):")
            print(head_table(report))
            effect = ablation_effect(model, self.probes, best.name)
            base, ablated = effect["continuation_accuracy"], effect["continuation_accuracy_ablated"]
            if base is not None:
                print(ablation_line(base, ablated, [best.name]))
                metrics.update({"hparam/continuation_accuracy": base,
                                "hparam/continuation_accuracy_ablated": ablated})
            metrics.update({"hparam/best_head_referent": best.referent, "hparam/best_head_top1": best.top1})
        views = []
        for sentence in self.sentences:
            ids = self.tokenizer.encode(sentence)
            tokens = self.tokenizer.token_strings(ids)
            patterns = capture_attention(model, [ids], crop=True)[0]
            tokens = tokens[:len(patterns[0][0])]  # as cropped to block_size
            marked = {} if best is None else {"best": (best.layer, best.head), "note": (
                f"best head on {len(self.probes)} probes (referent {best.referent:.2f}, top-1 {100 * best.top1:.0f}%)")}
            views.append(sentence_view(sentence, tokens, patterns, **marked))
            query = last_pronoun_pos(tokens)
            if query is None:
                continue
            layer = best.layer if best is not None else len(patterns) - 1
            print(f"\n{sentence!r}: where {tokens[query].strip()!r} looks, layer {layer}:")
            print(top_attended(patterns[layer], tokens, query, k=3, layer=layer))
        return metrics, views
