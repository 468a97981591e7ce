"""The pass: what the watch runs the model on, what it reads from it, and what that says.

Every kind of probe set is one record, a `ProbeKind`, in one registry, `PROBE_KINDS`: how its set is made for a run
or a checkpoint (`watch/measure/probesets.py` makes it), what the passes between evaluations read of it, its scores
and its numbers in the JSON. How each kind is shown (its lines in the head report, its TensorBoard scalars and
charts) is its record beside the views, `watch.show.kinds.SHOWN`. A new kind is one record in each (and, for a file
of a new shape, its line's record in `data/probes.py`).

A pass, `read_pass`: `measure` runs each probe set through the model once (`watch/measure/capture.py`, the model's
named sites: model/hooks.py) and `tally` adds up every score of its kind and of the head types measured on it
(`watch/measure/headtypes.py`, functions of a capture in `watch/measure/scores.py`) into one `Results`, with the
attention patterns of the watched sentences; a kind read by running the model more than once (activation patching:
`runs`) adds its figures. `interpret` makes the `Reading`: what those numbers say (the pronoun head table, pronoun
agreement and the heads that read the name, every head's type scores and, against the untrained model, its type;
how the heads compose, from the weights; and the baselines it was read against: the untrained model, and for a
fine-tune the model before fine-tuning). The views all read the same `Reading`, so none of them derives it again:
the report (`watch/show/report.py`), TensorBoard (`watch/show/tensorboard.py`), the heatmaps and the attention page,
`sample.py` and the proofs by ablation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from data.probes import AgreementProbe, Probe
from data.tokenizer import Tokenizer
from model.gpt import evaluating
from watch.measure import patching, paths, probesets, scores
from watch.measure.capture import Capture, captures, sentence_patterns
from watch.measure.composition import Composition, composition
from watch.measure.heads import Ablation, ablation_names, head_name
from watch.measure.headtypes import TYPES, TypedHead, best_offset, head_types, heads_of, type_scores
from watch.measure.patching import PAIRS, PATHS
from watch.measure.probesets import AGREEMENT, PRONOUN, REACH, REPEATED, SENTENCES, TEXT, ProbeSet, ProbeSets
from watch.measure.pronouns import AgreementStats, ContinuationStats, HeadStats, ProbeReport, baselines, name_readers
from watch.measure.scores import Measure


@dataclass
class Results:
    """What one pass found. `heads[score]` is [layer, head] (float64; NaN where the score had nothing
    to average), `numbers[score]` a number per model score, `counts[score]` how many positions,
    probes or contexts it averaged, `patterns[sentence][layer]` the watched sentences' patterns."""

    heads: dict[str, torch.Tensor]
    numbers: dict[str, float]
    counts: dict[str, int]
    patterns: list[list[torch.Tensor]]
    sets: ProbeSets
    forwards: int
    ablated: list[str] = field(default_factory=list)
    paths: list[paths.Path] = field(default_factory=list)  # which head feeds which, where the pass read the paths

    def head(self, score: str, layer: int, head: int) -> float | None:
        """One head's score, None when it was not measured."""
        values = self.heads.get(score)
        return None if values is None or torch.isnan(values[layer, head]) else float(values[layer, head])

    def per_head(self, score: str) -> dict[str, float]:
        """{"L0H0": value, ...} for one score (empty when it was not measured)."""
        values = self.heads.get(score)
        if values is None:
            return {}
        return {
            head_name(layer, head): float(values[layer, head])
            for layer in range(values.shape[0])
            for head in range(values.shape[1])
            if not torch.isnan(values[layer, head])
        }

    def reach(self, suffix: str = "") -> dict[str, dict[int, float]]:
        """{"L1H0": {distance: score}}: each head's induction score where the earlier copy is that many tokens back,
        at each distance measured (the `REACH` set's, then the `REPEATED` set's L: the plain induction score); with
        `suffix` "_spread", the spread of each."""
        reach, repeated = self.sets.get(REACH), self.sets.get(REPEATED)
        measured = [(d, f"induction_{d}") for _, d in (reach.items[0] if reach is not None else ())]
        measured += [(len(repeated.ids[0]) // 2, "induction")] if repeated is not None else []
        found: dict[str, dict[int, float]] = {}
        for d, name in measured:
            for head, value in self.per_head(name + suffix).items():
                found.setdefault(head, {})[d] = value
        return found

    def best(self, score: str) -> tuple[str, float] | None:
        """The head with the highest score (earliest first on ties), and the score."""
        found = self.per_head(score)
        if not found:
            return None
        name = max(found, key=found.get)  # the first of equal highest: max keeps the earliest
        return name, found[name]

    def best_spread(self, score: str) -> float | None:
        """The spread of the best head's `score` (None where it has none)."""
        best = self.best(score)
        return self.per_head(f"{score}_spread").get(best[0]) if best is not None else None


@dataclass(frozen=True)
class Reading:
    """One pass's `results` and what they say (None, or empty, where the pass had no set to say it)."""

    results: Results
    pronouns: ProbeReport | None  # the pronoun probes' head table
    agreement: AgreementStats | None  # the single-person contexts
    name_readers: list[str]  # the heads that read the name before a pronoun
    type_scores: dict[str, torch.Tensor]  # {type: [layer, head]}
    offsets: torch.Tensor | None  # each head's best positional offset [layer, head]
    types: dict[str, TypedHead]  # each head's type, against `untrained`
    typed: dict[str, list[TypedHead]]  # {type: its heads, highest score first}
    composition: Composition | None  # how the heads compose (None: not read, or a one-layer model)
    reach: dict[str, dict[int, float]]  # each head's induction score by distance to the earlier copy
    untrained: Reading | None  # the untrained model's reading, if the types were measured against it
    before: Reading | None = None  # a fine-tune's model before fine-tuning, read against the same untrained


# --- the kinds of probe set ------------------------------------------------------------------------------

# What the passes between the whole ones read of a set: all of it, its first QUICK_TOKENS tokens, its first half (the
# pairs patching runs many times over), or nothing every watch_interval steps and all of it at evaluations.
WHOLE, CUT, HALF, AT_EVALUATIONS = "whole", "cut", "half", "at evaluations"
PRONOUN_WEIGHTS = ("referent", "distractor", "top1")  # what a head's weight from the pronoun says (`pronoun_score`)


@dataclass
class Materials:
    """What a run or a checkpoint makes its probe sets from (`watch_sets`)."""

    tokenizer: Tokenizer
    block_size: int
    train_tokens: np.ndarray | None = None  # the training split: repeated random tokens are drawn from its tokens
    text: np.ndarray | Sequence[int] | None = None  # held-out text
    text_source: str = "the val split"  # where the held-out text comes from, for reports
    files: dict[str, str | Path | None] = field(default_factory=dict)  # the probe files, by kind
    texts: Sequence[str] = ()  # the sentences to show
    corpus: str | None = None  # the training text's name or path: what separates its examples (`token_pool`)
    draw: int = 0  # which draw of random sequences (`probesets.draw_seed`): the watch reads draw 0
    paths: bool = True  # whether path patching reads which head feeds which on the pairs (`watch/measure/paths.py`)
    made: dict = field(default_factory=dict, repr=False)  # the files' sets, made once however many kinds read them

    @cached_property
    def pool(self) -> probesets.TokenPool:
        """The tokens repeated random tokens are drawn from, and the rule that chose them (`token_pool`)."""
        return probesets.token_pool(self.train_tokens, self.tokenizer, self.corpus)

    def file(self, kind: str, records: type) -> ProbeSet | None:
        """The `kind` set of the file of `records` given for it; None when none is."""
        path = self.files.get(kind)
        if path and kind not in self.made:
            self.made[kind] = probesets.from_file(kind, records, path, self.tokenizer, self.block_size)
        return self.made.get(kind)


@dataclass(frozen=True)
class ProbeKind:
    """One kind of probe set, and what the watch measures on it (`PROBE_KINDS`); how it is shown is its record in
    `watch.show.kinds.SHOWN`."""

    name: str
    # Its set for a run or a checkpoint, or why there is none (a reason, said in reports; None: not asked for).
    make: Callable[[Materials], ProbeSet | str | None]
    quick: str = WHOLE  # what a pass between the whole ones reads of it (`quick_sets`)
    scores: dict[str, Measure] = field(default_factory=dict)  # read from each capture of it, by name (`tally`)
    numbers: tuple[str, ...] = ()  # its numbers in `sample.py --heads --json`, and in TensorBoard as heads/{name}
    # What it reads by running the model more than once ({score: [layer, head], or a number}): activation patching
    # runs each clean prompt's parts into its corrupted twin. A set of such a kind is read this way, not captured.
    # What the pass found so far ({score: [layer, head]}) is given too: path patching follows patching's heads.
    runs: Callable[[nn.Module, ProbeSet, dict], dict[str, torch.Tensor]] | None = None


def varied_windows(materials: Materials) -> ProbeSet | str:
    """The held-out windows (`probesets.held_out_text`, distinct pairs of them), unless there are fewer pairs than a
    spread needs (`probesets.MIN_DRAWS`): a text that repeats itself ('ab' * 3000, one token repeated) has only a few,
    however many places are drawn, and a spread over so few would claim a certainty it does not have, so nothing is
    measured on them."""
    made = probesets.held_out_text(materials.text, materials.block_size, source=materials.text_source)
    pairs = len(made.ids) // 2 if isinstance(made, ProbeSet) else probesets.MIN_DRAWS
    if pairs < probesets.MIN_DRAWS:
        return (
            f"only {pairs} different pair{'s' if pairs > 1 else ''} of {len(made.ids[0])}-token windows can be "
            f"drawn from {materials.text_source} (a short text, or one that repeats itself), fewer than the "
            f"{probesets.MIN_DRAWS} a spread needs: previous-token, sink, current-token, positional and broad "
            f"scores and the in-context score are not measurable on it; give a longer, varied text"
        )
    return made


def watched_pairs(materials: Materials) -> ProbeSet | str:
    """The pronoun probes' pairs where there are pronoun probes, else pairs of repeated random tokens (made once: the
    paths read the same)."""
    if PAIRS not in materials.made:
        probes = materials.file(PRONOUN, Probe)
        materials.made[PAIRS] = (
            patching.pronoun_pairs(probes, materials.tokenizer)
            if probes is not None
            else patching.repeat_pairs(materials.pool.tokens, materials.block_size)
        )
    return materials.made[PAIRS]


def drawn(make: Callable, kind: str) -> Callable[[Materials], ProbeSet | str | None]:
    """The maker of a set of random tokens of `kind` (`make`: `repeated_tokens`, `repeats_by_distance`), drawn from the
    materials' pool with the seed of their draw (`probesets.draw_seed`)."""
    return lambda materials: make(materials.pool, materials.block_size, seed=probesets.draw_seed(materials.draw, kind))


PROBE_KINDS: dict[str, ProbeKind] = {
    kind.name: kind
    for kind in (
        ProbeKind(
            REPEATED,
            make=drawn(probesets.repeated_tokens, REPEATED),
            quick=CUT,
            scores={
                # The loss of predicting tokens 2..L of each copy (nats/token), and each sequence's in-context gain
                # (first minus second) squared, for its spread.
                "loss_first_copy": scores.mean_of(partial(scores.copy_losses, second=False)),
                "loss_second_copy": scores.mean_of(partial(scores.copy_losses, second=True)),
                "in_context_gain_squares": scores.mean_of(scores.gains, squared=True),
            },
            numbers=("in_context_gain", "in_context_gain_spread", "loss_first_copy", "loss_second_copy"),
        ),
        ProbeKind(
            REACH,
            make=drawn(probesets.repeats_by_distance, REACH),
            quick=AT_EVALUATIONS,
            # Induction where the earlier copy is d tokens back.
            scores={
                name: measure
                for d in probesets.REACH_DISTANCES
                for name, measure in scores.on_targets_with_spread(
                    f"induction_{d}", f"induction targets at {d}", partial(scores.reach_targets, distance=d)
                ).items()
            },
        ),
        ProbeKind(
            TEXT,
            make=varied_windows,
            quick=CUT,
            scores={
                "broad": scores.broad,
                # Loss of the tokens late in a context minus that of the same tokens early in one (nats; Olsson's
                # loss at token 500 minus loss at token 50), its square for its spread, and the mean next-token loss.
                "in_context_score": scores.mean_of(scores.in_context_differences),
                "in_context_score_squares": scores.mean_of(scores.in_context_differences, squared=True),
                "text_loss": scores.mean_of(scores.next_token_losses),
            },
            numbers=("in_context_score", "in_context_score_spread", "text_loss"),
        ),
        ProbeKind(
            PRONOUN,
            make=lambda materials: materials.file(PRONOUN, Probe),
            scores={
                **{weight: scores.pronoun_score(weight) for weight in PRONOUN_WEIGHTS},
                **{f"{weight}_no_sink": scores.pronoun_score(weight, no_sink=True) for weight in PRONOUN_WEIGHTS},
                # The share of probes whose next-token argmax after the pronoun is something the referent does, and
                # something the other noun does.
                "continuation_accuracy": partial(scores.argmax_among, whose="referent"),
                "distractor_rate": partial(scores.argmax_among, whose="distractor"),
                "logit_diff": scores.logit_diff,
            },
        ),
        ProbeKind(
            AGREEMENT,
            make=lambda materials: materials.file(AGREEMENT, AgreementProbe),
            scores={
                "agreement_accuracy": scores.right_word(),
                "agreement_accuracy_first_mention": scores.right_word("first"),
                "agreement_accuracy_second_mention": scores.right_word("second"),
                "agreement_share": scores.right_word(share=True),
                "name_reading": scores.name_reading,
            },
        ),
        ProbeKind(
            PAIRS,
            make=watched_pairs,
            quick=HALF,
            runs=lambda model, probe_set, found: patching.watched(model, probe_set.items),
        ),
        ProbeKind(  # the same pairs, where the run reads the paths (watch_paths), after their patching
            PATHS,
            make=lambda materials: paths.on(watched_pairs(materials)) if materials.paths else None,
            quick=HALF,
            runs=lambda model, probe_set, found: {PATHS: paths.watched(model, probe_set.items, found)},
        ),
        ProbeKind(
            SENTENCES,
            make=lambda materials: (
                probesets.sentences(materials.texts, materials.tokenizer, materials.block_size)
                if materials.texts
                else None
            ),
            quick=AT_EVALUATIONS,  # a pass keeps their patterns (`tally`): the heatmaps and the attention page
        ),
    )
}


def watch_sets(materials: Materials) -> ProbeSets:
    """Every probe set a run or a checkpoint is watched on, each made from `materials` as its kind says."""
    sets = ProbeSets()
    for kind in PROBE_KINDS.values():
        sets.add(kind.name, kind.make(materials))
    return sets


def quick_sets(sets: ProbeSets, *, evaluation: bool = False) -> ProbeSets:
    """What a pass between the whole ones reads, as cheap as ever: each set as its kind's `quick` says, and those
    read at evaluations only when `evaluation`. Its head scores are within about 0.01 of the whole sets'; its
    in-context score is too rough to report (`AttentionWatch.read`)."""
    kept = {}
    for name, probe_set in sets.sets.items():
        quick = PROBE_KINDS[name].quick
        if quick in (CUT, HALF):
            half = len(probe_set) // 2 * len(probe_set.ids[0])
            kept[name] = probe_set.cut(probesets.QUICK_TOKENS if quick == CUT else half)
        elif quick == WHOLE or evaluation:
            kept[name] = probe_set
    return ProbeSets(kept, dict(sets.missing))


# --- the pass -----------------------------------------------------------------------------------------------


def untrained_like(model: nn.Module, seed: int) -> nn.Module:
    """The model of the same config as `model` as training started it: initialised from `seed`
    (what `Trainer.from_config` seeds before building the model), on the same device. The global random
    state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(model)(model.config)
    return fresh.to(next(model.parameters()).device).eval()


def measure(
    model: nn.Module, sets: ProbeSets, ablate: Ablation | None = None, kinds: tuple[str, ...] | None = None
) -> Results:
    """Captures each probe set of `sets` (only `kinds`, if given) once and reads every score of its kind and of the
    head types measured on it; `ablate` removes heads for the whole pass."""
    chosen = [s for kind, s in sets.sets.items() if kinds is None or kind in kinds]
    captured = [s for s in chosen if PROBE_KINDS[s.kind].runs is None]
    results = tally((capture for probe_set in captured for capture in captures(model, probe_set, ablate)), sets)
    results.ablated = ablation_names(ablate)
    for probe_set in chosen if ablate is None else ():  # what removing heads costs is read from the captures alone
        runs = PROBE_KINDS[probe_set.kind].runs
        for name, values in (
            runs(model, probe_set, {**results.numbers, **results.heads}) if runs is not None else {}
        ).items():
            if isinstance(values, list):  # path patching's paths
                results.paths = values
            elif values.dim():  # a score of each head
                results.heads[name] = values
            else:
                results.numbers[name] = float(values)
            results.counts[name] = len(probe_set)
    return results


def tally(captured: Iterable[Capture], sets: ProbeSets) -> Results:
    """Every score of each capture's kind and of the head types measured on it, added up over the captures, and the
    watched sentences' patterns: the `Results` of a pass. Captures made by hand (`capture_from_patterns`) are tallied
    the same way."""
    totals: dict[str, tuple] = {}
    patterns: list[list[torch.Tensor]] = []
    forwards = 0
    for capture in captured:
        forwards += 1
        kind = capture.probe_set.kind
        for name, score in measures(kind).items():
            total, count = score(capture)
            before = totals.get(name)
            totals[name] = (total, count) if before is None else (before[0] + total, before[1] + count)
        if kind == SENTENCES:
            patterns += sentence_patterns([capture])  # on to the heatmaps and the attention page
    heads, numbers, counts = {}, {}, {}
    for name, (total, count) in totals.items():  # a score with nothing to average: NaN per head, no number
        counts[name] = int(count)
        if isinstance(total, torch.Tensor):  # a score of each head
            heads[name] = total / count if count else torch.full_like(total, float("nan"))
        elif count:
            numbers[name] = float(total) / count
    numbers.update(scores.derived_model_scores(numbers, counts))
    heads.update(scores.derived_head_scores(heads, counts))
    return Results(heads, numbers, counts, patterns, sets, forwards)


def measures(kind: str) -> dict[str, Measure]:
    """The scores a pass reads from a capture of `kind`, by name: its kind's and those of the head types measured
    on it."""
    of_types = [head_type.measures for head_type in TYPES.values() if head_type.probe_set == kind]
    return {**PROBE_KINDS[kind].scores, **{name: measure for found in of_types for name, measure in found.items()}}


# --- what a pass says -------------------------------------------------------------------------------------


def read_pass(
    model: nn.Module,
    sets: ProbeSets,
    *,
    untrained: Reading | None = None,
    before: Reading | None = None,
    ablate: Ablation | None = None,
    kinds: tuple[str, ...] | None = None,
    compose: bool = False,
    is_untrained: bool = False,
) -> Reading:
    """One pass over `sets` (only `kinds`, if given; `ablate`'s heads removed), read against the baselines given, or
    with `is_untrained` (`model` is the untrained model itself) against itself. `compose` also reads how the heads
    compose, from the weights: what the watch and `sample.py` show. Removing heads leaves the weights as they are,
    and for GPT-2 it takes seconds, so the proofs do without it."""
    found = composition(model) if compose else None
    with evaluating(model):  # once for the pass's many runs
        results = measure(model, sets, ablate, kinds)
    return interpret(results, untrained, found, before, is_untrained=is_untrained)


def interpret(
    results: Results,
    untrained: Reading | None = None,
    composition: Composition | None = None,
    before: Reading | None = None,
    *,
    is_untrained: bool = False,
) -> Reading:
    """The reading of a pass's results, also of one read from captures made elsewhere; head types are
    measured against `untrained`'s type scores (against its own with `is_untrained`), or by the score alone."""
    typed_scores = type_scores(results.heads)
    baseline = typed_scores if is_untrained else untrained.type_scores if untrained is not None else {}
    types = head_types(typed_scores, baseline)
    reading = Reading(
        results,
        probe_report(results),
        agreement_stats(results),
        name_readers(results.per_head("name_reading")),
        typed_scores,
        best_offset(results.heads)[1],
        types,
        {kind: heads_of(types, kind) for kind in TYPES},
        composition,
        results.reach(),
        untrained,
        before,
    )
    return replace(reading, untrained=reading) if is_untrained else reading


def probe_report(results: Results) -> ProbeReport | None:
    """The pronoun probes' report, from a pass that had them (None otherwise)."""
    probes = results.sets.get(PRONOUN)
    if probes is None or "referent" not in results.heads or not len(probes):
        return None
    n, n_no_sink = results.counts["referent"], results.counts.get("referent_no_sink", 0)
    names = ("referent", "distractor", "top1", "referent_no_sink", "distractor_no_sink", "top1_no_sink")
    heads = {}
    for layer, head in np.ndindex(results.heads["referent"].shape):
        v = {name: results.head(name, layer, head) for name in names}  # None where no probe counted
        top1_no_sink = round(v["top1_no_sink"] * n_no_sink) if v["top1_no_sink"] is not None else 0
        heads[head_name(layer, head)] = HeadStats(
            layer, head, *v.values(), n, round(v["top1"] * n), n_no_sink, top1_no_sink
        )
    numbers, counts = results.numbers, results.counts
    continuation = ContinuationStats(
        numbers.get("continuation_accuracy"),
        numbers.get("distractor_rate"),
        numbers.get("logit_diff"),
        counts.get("continuation_accuracy", 0),
        round(numbers.get("continuation_accuracy", 0.0) * counts.get("continuation_accuracy", 0)),
        counts.get("logit_diff", 0),
    )
    return ProbeReport(heads, n, baselines(probes.items), continuation, list(results.ablated))


def agreement_stats(results: Results) -> AgreementStats | None:
    """The agreement contexts' figures, from a pass that had them (None otherwise)."""
    numbers = results.numbers
    if "agreement_accuracy" not in numbers:
        return None
    accuracy, n = numbers["agreement_accuracy"], results.counts["agreement_accuracy"]
    named = {m: f"agreement_accuracy_{m}_mention" for m in ("first", "second")}
    by_mention = {m: numbers[name] for m, name in named.items() if name in numbers}
    return AgreementStats(accuracy, by_mention, numbers["agreement_share"], n, round(accuracy * n))
