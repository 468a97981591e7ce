"""The pass: what the watch runs the model on, what it reads from it, and what that says.

Every kind of probe set is one record, a `ProbeKind`, in one registry, `PROBE_KINDS`: how its set is made for a run
or a checkpoint (`watch/measure/probesets.py` makes it), what the passes between evaluations read of it, its
scores, its lines in the head report, its TensorBoard scalars and charts, and its numbers in the JSON. The pass, its
reading, the report and TensorBoard iterate the registry, so a new kind is one record here (and, for a file of a
new shape, its line's record in `data/probes.py`).

A pass (`score`) runs each probe set through the model once (`watch/measure/capture.py`) and reads every score of its
kind and of the head types measured on it (`watch/measure/headtypes.py`) from those captures into one `Results`,
with the attention patterns of the watched sentences. Its `Reading` (`read_results`) adds what those numbers say:
the pronoun head table, pronoun agreement and the heads that read the name, every head's type scores and, against
the untrained model, its type; how the heads compose, from the weights; and the baselines it was read against (the
untrained model, and for a fine-tune the model before fine-tuning). The views all read the same `Reading`, so none
of them derives it again: the report (`watch/show/report.py`), TensorBoard (`watch/show/tensorboard.py`, which writes
the heatmaps `watch/show/heatmaps.py` draws of the patterns), the attention page, `sample.py` and the proofs by
ablation.
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
from model.ablation import Ablation
from watch.measure import patching, probesets, scores
from watch.measure.capture import Capture, captures, sentence_patterns
from watch.measure.composition import Composition, composition
from watch.measure.heads import ablation_names, head_name, parse_head
from watch.measure.headtypes import CLOSE, TYPES, TypedHead, best_offset, head_types, heads_of, needed, type_scores
from watch.measure.patching import PAIRS
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

    def reach_spreads(self) -> dict[str, dict[int, float]]:
        """The spread of each of `reach`'s scores."""
        return self.reach("_spread")

    def best(self, score: str) -> tuple[str, float] | None:
        """The head with the highest score (earliest first on ties), and the score."""
        found = self.per_head(score)
        if not found:
            return None
        name = max(found, key=found.get)  # the first of equal highest: max keeps the earliest
        return name, found[name]


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

WHOLE, CUT, AT_EVALUATIONS = "whole", "cut", "at evaluations"  # what the passes between the whole ones read of a set
PRONOUN_WEIGHTS = ("referent", "distractor", "top1")  # what a head's weight from the pronoun says (`pronoun_score`)


@dataclass
class Source:
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
    """One kind of probe set, and all that the watch does with it (`PROBE_KINDS`)."""

    name: str
    # Its set for a run or a checkpoint, or why there is none (a reason, said in reports; None: not asked for).
    make: Callable[[Source], ProbeSet | str | None]
    # What a pass between the whole ones reads of it (`quick_sets`): all of it (WHOLE), its first QUICK_TOKENS tokens
    # (CUT), or nothing every watch_interval steps and all of it at evaluations (AT_EVALUATIONS).
    quick: str = WHOLE
    scores: dict[str, Measure] = field(default_factory=dict)  # read from each capture of it, by name (`read`)
    numbers: tuple[str, ...] = ()  # its numbers in `sample.py --heads --json`, and in TensorBoard as heads/{name}
    lines: Callable[[Reading], list[str]] = lambda reading: []  # its lines in the head report, after the types'
    # Its other TensorBoard scalars by tag: a number goes in the run's own run, [layer, head] in each head's run.
    scalars: Callable[[Reading], dict[str, float | torch.Tensor | None]] = lambda reading: {}
    # Its charts in TensorBoard's Custom Scalars, {title: [tag regexes]}, in the category `category`.
    charts: dict[str, list[str]] = field(default_factory=dict)
    category: str = ""
    # What it reads by running the model more than once ({score: [layer, head]}): activation patching runs each
    # clean prompt's parts into its corrupted twin. A set of such a kind is read this way instead of captured.
    runs: Callable[[nn.Module, ProbeSet], dict[str, torch.Tensor]] | None = None


def _best_reach(reading: Reading) -> tuple[str, dict[int, float]]:
    """The best induction head and its score by distance to the earlier copy, where the pass read the repeats by
    distance (`REACH`) beside the repeated tokens ({} otherwise: a quick pass reads only the longest)."""
    best = reading.results.best("induction")
    reach = reading.reach.get(best[0], {}) if best is not None else {}
    return (best[0], reach) if len(reach) > 1 else ("", {})


def _repeated_lines(reading: Reading) -> list[str]:
    """How far back the best induction head copies, and the in-context gain, with its spread and what it means."""
    lines = []
    best, reach = _best_reach(reading)
    if reach and max(reach.values()) >= CLOSE * needed(None):  # some distance copies
        far, near = reach[max(reach)], max(reach.values())
        shape = (
            " (it copies from close by more than from far: the longest distances are the weakest)"
            if far < 0.75 * near
            else ""
        )
        spreads = reading.results.reach_spreads().get(best, {})
        by_distance = ", ".join(f"{d} tokens {scores.with_spread(value, spreads.get(d))}" for d, value in reach.items())
        lines.append(f"{best}'s induction score by distance to the earlier copy: {by_distance}{shape}")
    numbers = reading.results.numbers
    if "in_context_gain" in numbers:
        then = reading.untrained.results.numbers if reading.untrained is not None else {}
        better = "better" if numbers["in_context_gain"] > 0 else "worse"
        meaning = f"the second copy is predicted {{size}} nats {better} than the first"
        lines.append(
            f"in-context gain on repeated random tokens: {_measured(numbers, 'in_context_gain', meaning)} "
            f"(first copy {numbers['loss_first_copy']:.3f}, second {numbers['loss_second_copy']:.3f}"
            f"{_then(then, 'in_context_gain')})"
        )
    return lines


def _spread_scalars(reading: Reading) -> dict[str, float | torch.Tensor | None]:
    """Beside each head type read from the repeated tokens, its spread: every head's (heads/{type}_spread) and the
    best head's (heads/{type}/best_spread, beside heads/{type}/best)."""
    scalars = {}
    for name in (name for name, head_type in TYPES.items() if head_type.probe_set == REPEATED):
        spreads, best = reading.results.heads.get(f"{name}_spread"), reading.results.best(name)
        if spreads is not None and best is not None:
            scalars[f"heads/{name}_spread"] = spreads
            scalars[f"heads/{name}/best_spread"] = reading.results.head(f"{name}_spread", *parse_head(best[0]))
    return scalars


def _reach_scalars(reading: Reading) -> dict[str, float | None]:
    """The best induction head's score at each distance, and its spread."""
    best, reach = _best_reach(reading)
    spreads = reading.results.reach_spreads().get(best, {})
    scalars = {f"heads/induction/best_at_{d:02d}": value for d, value in reach.items()}
    return scalars | {f"heads/induction/best_at_{d:02d}_spread": spreads.get(d) for d in reach}


def varied_windows(source: Source) -> ProbeSet | str:
    """The held-out windows (`probesets.held_out_text`, distinct pairs of them), unless there are fewer pairs than a
    spread needs (`probesets.MIN_DRAWS`): a text that repeats itself ('ab' * 3000, one token repeated) has only a few,
    however many places are drawn, and a spread over so few would claim a certainty it does not have, so nothing is
    measured on them."""
    made = probesets.held_out_text(source.text, source.block_size, source=source.text_source)
    pairs = len(made.ids) // 2 if isinstance(made, ProbeSet) else probesets.MIN_DRAWS
    if pairs < probesets.MIN_DRAWS:
        return (
            f"only {pairs} different pair{'s' if pairs > 1 else ''} of {len(made.ids[0])}-token windows can be "
            f"drawn from {source.text_source} (a short text, or one that repeats itself), fewer than the "
            f"{probesets.MIN_DRAWS} a spread needs: previous-token, sink, current-token, positional and broad "
            f"scores and the in-context score are not measurable on it; give a longer, varied text"
        )
    return made


def _text_lines(reading: Reading) -> list[str]:
    """The in-context score, with its spread and what it means."""
    numbers = reading.results.numbers
    if "in_context_score" not in numbers:
        return []
    then = reading.untrained.results.numbers if reading.untrained is not None else {}
    text = reading.results.sets.get(TEXT)
    length = len(text.ids[0])
    early, late = probesets.icl_positions(length)
    where = (
        f"tokens {late.start}-{late.stop - 1} of a {length}-token context "
        f"against the same tokens at {early.start}-{early.start + late.stop - late.start - 1}"
    )
    score = numbers["in_context_score"]
    meaning = f"later in the context, tokens are predicted {{size}} nats {'better' if score < 0 else 'worse'}"
    # Olsson et al.'s score is the late loss minus the early one (below 0 is better): shown as nats saved.
    measured, was = _measured(numbers, "in_context_score", meaning, "nats", -1), _then(then, "in_context_score", -1)
    return [
        f"in-context score on held-out text: {measured} ({where}, {len(text.ids) // 2} pairs of windows"
        f"{was}; Olsson et al.'s late-minus-early loss, {score:+.3f})"
    ]


def _measured(numbers: dict, name: str, meaning: str, unit: str = "nats/token", sign: int = 1) -> str:
    """ "+0.12 ± 0.03 nats/token: the second copy is ...", or "no measurable effect, +0.02 ± 0.05 nats/token"
    when the figure (times `sign`) lies inside its spread."""
    figure, inside = _figure(numbers, name, sign)
    if inside:
        return f"no measurable effect, {figure} {unit}"
    return f"{figure} {unit}: {meaning.format(size=figure.split(' ± ')[0].lstrip('+-'))}"  # at the figure's places


def _then(then: dict, name: str, sign: int = 1) -> str:
    if name not in then:
        return ""
    figure, inside = _figure(then, name, sign)
    return f"; untrained {figure}" + (", no measurable effect" if inside else "")


def _figure(numbers: dict, name: str, sign: int) -> tuple[str, bool]:
    """("+0.12 ± 0.03", whether the figure lies inside its spread)."""
    value, spread = sign * numbers[name], numbers.get(f"{name}_spread")
    return scores.with_spread(value, spread, sign=True), spread is not None and abs(value) <= spread


NO_ANSWER = (
    "the model does not prefer the clean prompts' answers over the corrupted ones' by more than the spread of that "
    "preference over the pairs"
)


def _patching_lines(reading: Reading) -> list[str]:
    """Which head carries the answer on the patched pairs, with its share and its direct attribution."""
    best, pairs = reading.results.best("patching"), reading.results.sets.get(PAIRS)
    if best is None:
        measured = pairs is not None and "patching" in reading.results.heads
        # Early in training: no answer yet for a head to carry (`patching.share_of_mean`).
        return [f"no head carries an answer yet on {pairs.about}: {NO_ANSWER}"] if measured else []
    name, share = best
    layer, head = parse_head(name)
    logits = float(reading.results.heads["attribution"][layer, head])
    spread = reading.results.head("patching_spread", layer, head)
    typed = reading.types.get(name)
    kind = f" ({TYPES[typed.kind].label} head)" if typed is not None and typed.kind is not None else ""
    share_text = f"{share:.2f}" if spread is None else f"{share:.2f} ± {spread:.2f}"
    return [
        f"{name}{kind} carries the answer most: its output, patched from each clean prompt into its corrupted "
        f"twin, brings back {share_text} of the logit difference (over {pairs.about}); its direct attribution "
        f"{logits:+.2f} logits"
    ]


def _patching_scalars(reading: Reading) -> dict[str, float | torch.Tensor | None]:
    """Every head's share and direct attribution, and the best share with its spread (None before there is one)."""
    best = reading.results.best("patching")
    spread = reading.results.head("patching_spread", *parse_head(best[0])) if best is not None else None
    return {
        "patching/share": reading.results.heads.get("patching"),
        "patching/attribution": reading.results.heads.get("attribution"),
        "patching/share/best": best[1] if best is not None else None,
        "patching/share/best_spread": spread,
    }


def _pronoun_scalars(reading: Reading) -> dict[str, float | torch.Tensor | None]:
    """Every head's weights from the pronoun and its top-1, the best head's, and what the model predicts next."""
    report = reading.pronouns
    if report is None:
        return {}
    best = ("referent", "distractor", "top1", "referent_no_sink", "top1_no_sink")
    return {
        **{f"attention/{weight}": reading.results.heads[weight] for weight in PRONOUN_WEIGHTS},
        **{f"attention/{score}/best": getattr(report.best, score) for score in best},
        "probes/continuation_accuracy": report.continuation.accuracy,
        "probes/logit_diff": report.continuation.logit_diff,
    }


PROBE_KINDS: dict[str, ProbeKind] = {
    kind.name: kind
    for kind in (
        ProbeKind(
            REPEATED,
            make=lambda source: probesets.repeated_tokens(
                source.pool, source.block_size, seed=probesets.draw_seed(source.draw, REPEATED)
            ),
            quick=CUT,
            scores={
                # The loss of predicting tokens 2..L of each copy (nats/token), and each sequence's in-context gain
                # (first minus second) squared, for its spread.
                "loss_first_copy": scores.mean_of(partial(scores.copy_losses, second=False)),
                "loss_second_copy": scores.mean_of(partial(scores.copy_losses, second=True)),
                "in_context_gain_squares": scores.mean_of(scores.gains, squared=True),
            },
            numbers=("in_context_gain", "in_context_gain_spread", "loss_first_copy", "loss_second_copy"),
            lines=_repeated_lines,
            scalars=_spread_scalars,
            # The phase change: the induction score and the in-context gain jump together.
            charts={"induction and in-context gain": [r"heads/induction/best$", r"heads/in_context_gain$"]},
            category="head types",
        ),
        ProbeKind(
            REACH,
            make=lambda source: probesets.repeats_by_distance(
                source.pool, source.block_size, seed=probesets.draw_seed(source.draw, REACH)
            ),
            quick=AT_EVALUATIONS,
            # Induction where the earlier copy is d tokens back.
            scores={
                name: measure
                for d in probesets.REACH_DISTANCES
                for name, measure in scores.on_targets_with_spread(
                    f"induction_{d}", f"induction targets at {d}", partial(scores.reach_targets, distance=d)
                ).items()
            },
            # Its line in the report, how far back the best induction head copies, comes before the in-context gain:
            # the repeated tokens' lines say both (`_repeated_lines`).
            scalars=_reach_scalars,
            # Whether the best induction head copies from far back as well as from close by.
            charts={"best induction head's score by distance to the earlier copy": [r"heads/induction/best_at_\d+$"]},
            category="head types",
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
            lines=_text_lines,
            scalars=lambda reading: {"heads/broad": reading.results.heads.get("broad")},
        ),
        ProbeKind(
            PRONOUN,
            make=lambda source: source.file(PRONOUN, Probe),
            scores={
                **{weight: scores.pronoun_score(weight) for weight in PRONOUN_WEIGHTS},
                **{f"{weight}_no_sink": scores.pronoun_score(weight, no_sink=True) for weight in PRONOUN_WEIGHTS},
                # The share of probes whose next-token argmax after the pronoun is something the referent does, and
                # something the other noun does.
                "continuation_accuracy": partial(scores.argmax_among, whose="referent"),
                "distractor_rate": partial(scores.argmax_among, whose="distractor"),
                "logit_diff": scores.logit_diff,
            },
            scalars=_pronoun_scalars,
            charts={
                # The best head's own line first: alone on its chart, no outlier setting can clip its climb.
                "referent weight and top-1 of the best head": [r"attention/(referent|top1)/best$"],
                "referent weight, every head": [r"attention/referent$"],
                "top-1, every head": [r"attention/top1$"],
                # The training loss (logged every log_interval steps) rather than the validation loss (5 points in
                # the demo, which smoothing bends out of shape), and every accuracy the probes report.
                "training loss and accuracy": [r"loss/train$", r"probes/.*accuracy"],
            },
            category="attention heads",
        ),
        ProbeKind(
            AGREEMENT,
            make=lambda source: source.file(AGREEMENT, AgreementProbe),
            scores={
                "agreement_accuracy": scores.right_word(),
                "agreement_accuracy_first_mention": scores.right_word("first"),
                "agreement_accuracy_second_mention": scores.right_word("second"),
                "agreement_share": scores.right_share,
                "name_reading": scores.name_reading,
            },
            # Each figure of the whole model: agreement, over every context and by mention, and its share.
            scalars=lambda reading: {
                f"probes/{n}": reading.results.numbers.get(n) for n in PROBE_KINDS[AGREEMENT].scores
            },
        ),
        ProbeKind(
            PAIRS,
            # The pronoun probes' pairs where there are pronoun probes, else pairs of repeated random tokens.
            make=lambda source: (
                patching.pronoun_pairs(source.file(PRONOUN, Probe), source.tokenizer)
                if source.file(PRONOUN, Probe) is not None
                else patching.repeat_pairs(source.pool.tokens, source.block_size)
            ),
            runs=lambda model, probe_set: patching.watched(model, probe_set.items),
            lines=_patching_lines,
            scalars=_patching_scalars,
            # When a head becomes the one that carries the answer, beside when its attention formed.
            charts={
                # The best head's share alone first, which TensorBoard's outlier scaling cannot clip.
                "share of the answer the best head's output carries": [r"patching/share/best$"],
                "share of the answer a head's output carries (activation patching), every head": [r"patching/share$"],
                "direct logit attribution (logits), every head": [r"patching/attribution$"],
            },
            category="patching",
        ),
        ProbeKind(
            SENTENCES,
            make=lambda source: (
                probesets.sentences(source.texts, source.tokenizer, source.block_size) if source.texts else None
            ),
            quick=AT_EVALUATIONS,  # a pass keeps their patterns (`read`): the heatmaps and the attention page
        ),
    )
}


def watch_sets(source: Source) -> ProbeSets:
    """Every probe set a run or a checkpoint is watched on, each made from `source` as its kind says."""
    sets = ProbeSets()
    for kind in PROBE_KINDS.values():
        sets.add(kind.name, kind.make(source))
    return sets


def quick_sets(sets: ProbeSets, *, evaluation: bool = False) -> ProbeSets:
    """What a pass between the whole ones reads, as cheap as ever: each set as its kind's `quick` says, and those
    read at evaluations only when `evaluation`. Its head scores are within about 0.01 of the whole sets'; its
    in-context score is too rough to report (`AttentionWatch.read`)."""
    kept = {}
    for name, probe_set in sets.sets.items():
        quick = PROBE_KINDS[name].quick
        if quick == CUT:
            kept[name] = probe_set.cut(probesets.QUICK_TOKENS)
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


def score(
    model: nn.Module, sets: ProbeSets, ablate: Ablation | None = None, kinds: tuple[str, ...] | None = None
) -> Results:
    """Captures each probe set of `sets` (only `kinds`, if given) once and reads every score of its kind and of the
    head types measured on it; `ablate` removes heads for the whole pass."""
    chosen = [s for kind, s in sets.sets.items() if kinds is None or kind in kinds]
    captured = [s for s in chosen if PROBE_KINDS[s.kind].runs is None]
    results = read((capture for probe_set in captured for capture in captures(model, probe_set, ablate)), sets)
    results.ablated = ablation_names(ablate)
    for probe_set in chosen if ablate is None else ():  # what removing heads costs is read from the captures alone
        runs = PROBE_KINDS[probe_set.kind].runs
        for name, values in (runs(model, probe_set) if runs is not None else {}).items():
            results.heads[name], results.counts[name] = values, len(probe_set)
    return results


def read(captured: Iterable[Capture], sets: ProbeSets) -> Results:
    """Every score of each capture's kind and of the head types measured on it, added up over the captures, and the
    watched sentences' patterns: the `Results` of a pass. Captures made by hand (`capture_from_patterns`) are read
    the same way."""
    totals: dict[str, tuple] = {}
    patterns: list[list[torch.Tensor]] = []
    forwards = 0
    for capture in captured:
        forwards += 1
        kind = capture.probe_set.kind
        for name, measure in measures(kind).items():
            total, count = measure(capture)
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
    return read_results(score(model, sets, ablate, kinds), untrained, found, before, is_untrained=is_untrained)


def read_results(
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
    typed = {kind: heads_of(types, kind) for kind in TYPES}
    offsets = best_offset(results.heads)[1]
    reach = results.reach()
    agreement = agreement_stats(results)
    name_weights = results.per_head("name_reading")
    reading = Reading(
        results,
        probe_report(results),
        agreement,
        name_readers(name_weights),
        typed_scores,
        offsets,
        types,
        typed,
        composition,
        reach,
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
    n_layer, n_head = results.heads["referent"].shape
    heads = {}
    names = ("referent", "distractor", "top1", "referent_no_sink", "distractor_no_sink", "top1_no_sink")
    for layer in range(n_layer):
        for head in range(n_head):
            v = {name: results.head(name, layer, head) for name in names}  # None where no probe counted
            heads[head_name(layer, head)] = HeadStats(
                layer,
                head,
                *(v[name] for name in names),
                n,
                round(v["top1"] * n),
                n_no_sink,
                round(v["top1_no_sink"] * n_no_sink) if v["top1_no_sink"] is not None else 0,
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
