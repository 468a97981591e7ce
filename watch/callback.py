"""Attention watching as a training callback: `AttentionWatch` has the hooks a `trainer.Trainer` calls, so training
plugs it in without knowing about attention. It reads `trainer.model`, `trainer.tokenizer`, `trainer.data`,
`trainer.cfg.seed` and `.max_iters`, `trainer.state` and, for a fine-tune, `trainer.model_before_fine_tuning()`.

At every watch point one pass gives one `Reading` (`watch/measure/reading.py`); the watch only decides what to
show of it: scalars every `watch_interval` steps; at evaluations also the tables, the heatmaps and what removing the
agreement heads costs; at the end of a completed run the report, the proof by ablation, the HParams and the attention
page.

An attention map's way to TensorBoard, a file each: the run's probe sets are made at the start (`on_fit_start`,
`watch_sets`: each kind's record in `watch/measure/reading.py`, made by `watch/measure/probesets.py`), the watched
sentences among them; every evaluation's pass runs each set through the model once (`watch/measure/capture.py`) and
keeps the sentences' patterns in its `Results` (`watch/measure/reading.py`); `watch/show/heatmaps.py` draws them and
`watch/show/tensorboard.py` writes the pictures (`on_evaluate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from common.cli import say
from common.errors import UserError, warn
from watch.measure.heads import last_pronoun_pos
from watch.measure.headtypes import TYPE_SETS, TYPES, types_not_measurable
from watch.measure.paths import worth_reading
from watch.measure.probesets import AGREEMENT, PRONOUN, SENTENCES, ProbeSets, held_out_sentences
from watch.measure.proofs import AblationResult, agreement_ablations, best_pronoun_proof, proofs
from watch.measure.reading import Materials, Reading, quick_sets, read_pass, untrained_like, watch_sets
from watch.show import report
from watch.show.heatmaps import SentenceHeatmaps
from watch.show.kinds import shown
from watch.show.page import SentenceView, reading_page, write_page
from watch.show.tensorboard import agreement_figures, log_charts, log_evaluation, log_scores


class AttentionWatch:
    """Watches a training run's attention: see the module's docstring. `probes` and `agreement` are
    JSONL files (or None); `sentences` are shown as heatmaps and on the page written to `page`."""

    def __init__(
        self,
        writer: Any,
        sentences: Sequence[str] = (),
        probes: str | Path | None = None,
        agreement: str | Path | None = None,
        *,
        page: str | Path | None = None,
        ablation: str = "zero",
        paths: bool = True,
    ) -> None:
        self.writer = writer
        self.texts = list(sentences)
        self.probes, self.agreement = probes, agreement
        self.page = Path(page) if page is not None else None
        self.ablation = ablation
        self.paths = paths  # whether each pass reads which head feeds which (watch/measure/paths.py)
        self.sets = ProbeSets()
        self.quick = self.between = self.sets  # what the passes between the whole ones read (`quick_sets`)
        self.shown: list[tuple[str, list[str]]] = []  # the watched sentences as shown: (text, its tokens)
        self.tokens_per_step = 0
        self.first_typed: dict[tuple[str, str], int] = {}  # (type, head) -> the first step it had it
        self.untrained: Reading | None = None
        self.before: Reading | None = None  # the model before fine-tuning, when the run fine-tunes one
        self.pending: set[str] = set()  # the baselines the evaluation at step 0 reads ("untrained", "before")
        self.heatmaps = SentenceHeatmaps()
        self.last: tuple[int, Reading, list[AblationResult]] | None = None  # the latest evaluation's

    def on_fit_start(self, trainer: Any) -> None:
        """The probe sets (with sentences from the held-out text when the run names none), the baselines and the
        Custom Scalars charts."""
        model, data = trainer.model, trainer.data
        self.tokens_per_step = getattr(trainer, "tokens_per_step", 0)
        val = data.tokens("val") if data is not None else None
        if not self.texts and val is not None:
            self.texts = held_out_sentences(val, trainer.tokenizer, model.config.block_size)
        self.sets = watch_sets(
            Materials(
                trainer.tokenizer,
                model.config.block_size,
                train_tokens=data.tokens("train") if data is not None else None,
                text=val,
                files={PRONOUN: self.probes, AGREEMENT: self.agreement},
                texts=self.texts,
                corpus=getattr(trainer.cfg, "dataset", None),
                paths=self.paths and worth_reading(model),
            )
        )
        sentences, probes = self.sets.get(SENTENCES), self.sets.get(PRONOUN)
        self.quick = quick_sets(self.sets)
        self.between = quick_sets(self.sets, evaluation=True)
        if sentences is not None:
            if probes is not None:  # the best head's heatmaps at every pass: TensorBoard's slider plays it forming
                self.quick.add(SENTENCES, sentences)
            self.shown = [
                (text, trainer.tokenizer.token_strings(ids))
                for text, ids in zip(sentences.items, sentences.ids, strict=True)
            ]
        # A watched sentence that is a probe has its pronoun's row outlined.
        rows = {item.probe.text: item.pronoun_pos for item in probes.items} if probes is not None else {}
        self.heatmaps = SentenceHeatmaps(self.shown, rows)
        # The evaluation at step 0 comes first and reads the model as it starts: in a run from scratch the untrained
        # model itself, in a fine-tune the model before fine-tuning. That reading is then the baseline, not a pass more.
        untrained = untrained_like(model, trainer.cfg.seed)
        state = getattr(trainer, "state", None)
        first = state is not None and state.step == 0 and state.eval_step != 0
        same = all(torch.equal(a, b) for a, b in zip(untrained.parameters(), model.parameters(), strict=True))
        before = trainer.model_before_fine_tuning() if hasattr(trainer, "model_before_fine_tuning") else None
        self.pending = {"untrained"} if first and same else set()
        if before is not None and before is model:
            self.pending.add("before")
        if "untrained" not in self.pending:
            self.untrained = read_pass(untrained, self.sets, kinds=TYPE_SETS, compose=True)  # the types' baseline
        if before is not None and "before" not in self.pending:
            self.before = read_pass(before, self.sets, untrained=self.untrained, kinds=TYPE_SETS)
        shape = model.config.n_layer, model.config.n_head
        log_charts(self.writer, self.sets, *shape, fine_tuning=before is not None)

    def read(self, model: Any, sets: ProbeSets, step: int) -> Reading:
        """`model` read on `sets` against the baselines, with its composition; at the evaluation at step 0, the
        baselines `on_fit_start` left to it. Notes the first step at which each head had each type, for the report
        ("since step 250"). Cut sets hold too few held-out windows for the in-context score: whole passes give it."""
        reading = read_pass(
            model,
            sets,
            untrained=self.untrained,
            before=self.before,
            compose=True,
            is_untrained="untrained" in self.pending,
        )
        if self.pending:
            self.untrained = reading.untrained
            if "before" in self.pending:
                self.before = reading
                reading = replace(reading, before=reading)
            self.pending = set()
        for head in reading.types.values():
            if head.kind:
                self.first_typed.setdefault((head.kind, head.name), step)
        if sets is not self.sets:
            for name in ("in_context_score", "in_context_score_spread"):
                reading.results.numbers.pop(name, None)
        return reading

    def on_watch(self, trainer: Any, step: int) -> None:
        reading = self.read(trainer.model, self.quick, step)
        log_scores(self.writer, step, reading)
        for tag, image in self.heatmaps.images(step, reading, every_layer=False):
            self.writer.add_image(tag, image, step, dataformats="HWC")

    def since(self, reading: Reading) -> dict[str, str]:
        """{type: "L0H1 since step 500 (2,048,000 tokens)"}: since when each type's best head in `reading` has
        had it. Another head may have had the type earlier and lost it (the induction demo's layer-1 head
        looks one token back for a while before its layer-0 partner takes over), so the step is the head's."""
        out = {}
        for kind in {t.kind for t in reading.types.values() if t.kind}:
            best = reading.typed[kind][0]
            step = self.first_typed.get((kind, best.name))
            if step is not None:
                tokens = f" ({step * self.tokens_per_step:,} tokens)" if self.tokens_per_step else ""
                out[kind] = f"{best.name} since step {step:,}{tokens}"
        return out

    def on_evaluate(self, trainer: Any, evaluation: Any) -> None:
        # The first evaluation (the baselines) and the last (the report) read every set whole; those between, the
        # quick sets with the sentences and the repeats by distance: 16,384 held-out tokens each time cost too much.
        step = evaluation.step
        sets = self.sets if self.pending or step >= trainer.cfg.max_iters else self.between
        reading = self.read(trainer.model, sets, step)
        ablations = agreement_ablations(trainer.model, sets, reading)
        self.last = (step, reading, ablations)
        log_evaluation(self.writer, step, reading, ablations, self.heatmaps.images(step, reading))
        if reading.before is not None and reading.types:
            tqdm.write(f"step {step}: {report.changes_line(reading)}")

    def on_fit_end(self, trainer: Any, result: Any) -> None:
        if not result.completed:
            return
        if self.last is not None and self.last[0] == result.step:
            _, reading, ablations = self.last
        else:
            reading = self.read(trainer.model, self.sets, result.step)
            ablations = agreement_ablations(trainer.model, self.sets, reading)
        result.metrics.update(self.report(trainer.model, reading, ablations))
        if self.page is not None and reading.results.patterns:
            try:
                title = f"Attention at step {result.step}: {self.page.parent}"
                page = reading_page(self.views(reading), title, reading, trainer.model, self.sets, trainer.tokenizer)
                result.files["attention page"] = write_page(self.page, page)
            except UserError as exc:
                warn(f"no attention page: {exc}")

    # --- the report at the end ------------------------------------------------------------------

    def report(self, model: Any, reading: Reading, agreement: list[AblationResult]) -> dict[str, float]:
        """Prints the head report; returns its numbers, named for TensorBoard's HParams."""
        metrics: dict[str, float] = {}
        found = proofs(model, self.sets, reading, self.ablation)
        pronouns = reading.pronouns
        removed = best_pronoun_proof(reading, found)
        if pronouns is not None:
            best = pronouns.best
            print(f"\nattention on {pronouns.n_probes} held-out probes (pronoun -> referent):")
            print(report.head_table(pronouns))
            base = pronouns.continuation_accuracy
            after = removed.reading.results.numbers.get("continuation_accuracy") if removed is not None else None
            if base is not None and after is not None:
                print(report.ablation_line(base, after, [best.name], pronouns.continuation.n))
                metrics.update({"hparam/continuation_accuracy": base, "hparam/continuation_accuracy_ablated": after})
            metrics.update({"hparam/best_head_referent": best.referent, "hparam/best_head_top1": best.top1})
        for view in self.views(reading):
            query = last_pronoun_pos(view.tokens)
            if query is None:
                continue
            layer = view.best[0] if pronouns is not None else len(view.patterns) - 1
            print(f"\n{view.text!r}: where {view.tokens[query].strip()!r} looks, layer {layer}:")
            print(report.top_attended(view.patterns[layer], view.tokens, query, k=3, layer=layer))
        if reading.agreement is not None:
            say("", *report.agreement_lines(reading, agreement).splitlines())
            metrics.update({f"hparam/{n}": v for n, v in agreement_figures(reading, agreement).items()})
        if reading.types:
            # Through `cli.say`: the sets' words name the text they were read from, a path we did not write.
            say("", f"head types ({report.measured_on(self.sets)}); the untrained model's scores in brackets:")
            say(*report.type_report(reading, [p for p in found if p is not removed], self.since(reading)).splitlines())
            best = {kind: reading.results.best(kind) for kind, head_type in TYPES.items() if head_type.hparam}
            metrics.update({f"hparam/best_{kind}": top[1] for kind, top in best.items() if top is not None})
            numbers = shown(reading.results.numbers)
            metrics.update({f"hparam/{n}": numbers[n] for n in ("in_context_gain", "in_context_score") if n in numbers})
        elif types_not_measurable(self.sets) is not None:  # say why the section is missing, as --heads does
            say("", types_not_measurable(self.sets))
        if reading.before is not None and reading.types:
            table = report.before_table(reading)
            if table:
                what = "the heads with a type before fine-tuning or now (* where it changed), and each type score"
                print(f"\nwhat fine-tuning changed: {what} before -> now:\n{table}")
            print(("" if table else "\n") + report.changes_line(reading))
            metrics["hparam/heads_changed_type"] = len(report.changed_heads(reading))
        print("\n" + report.composition_lines(reading))
        return metrics

    def views(self, reading: Reading) -> list[SentenceView]:
        """The watched sentences with their patterns, for the page, the best pronoun head marked."""
        pronouns = reading.pronouns
        marked = {}
        if pronouns is not None:
            best = pronouns.best
            figures = f"referent {best.referent:.2f}, ref > dis {100 * best.top1:.0f}%"
            note = f"best head on {pronouns.n_probes} probes ({figures})"
            marked = {"best": (best.layer, best.head), "note": note}
        return [
            SentenceView(text, tokens, patterns, **marked)
            for (text, tokens), patterns in zip(self.shown, reading.results.patterns, strict=True)
        ]
