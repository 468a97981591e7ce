"""How each kind of probe set is shown: the showing half of `watch.measure.reading.PROBE_KINDS`, one `Shown` record
per kind in `SHOWN`. Its lines in the head report (after the types'), its TensorBoard scalars and its charts in
TensorBoard's Custom Scalars, all read from one pass's `Reading`; the report (`watch/show/report.py`) and TensorBoard
(`watch/show/tensorboard.py`) iterate the records, in the registry's order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from watch.measure import probesets
from watch.measure.heads import parse_head, with_spread
from watch.measure.headtypes import CLOSE, TYPES, needed
from watch.measure.patching import LAYER_HEAD, PAIRS, PARTS, WATCHED_NAMES, WATCHED_PARTS
from watch.measure.paths import PATHS
from watch.measure.probesets import AGREEMENT, PRONOUN, REACH, REPEATED, SENTENCES, TEXT
from watch.measure.reading import PROBE_KINDS, PRONOUN_WEIGHTS, Reading

Scalars = dict[str, float | torch.Tensor | None]  # by tag: a number in the run's own run, [layer, head] in each head's


@dataclass(frozen=True)
class Shown:
    """How one kind of probe set is shown."""

    lines: Callable[[Reading], list[str]] = lambda reading: []  # its lines in the head report, after the types'
    scalars: Callable[[Reading], Scalars] = lambda reading: {}  # its TensorBoard scalars but its numbers
    charts: dict[str, list[str]] = field(default_factory=dict)  # {title: [tag regexes]}, in the category `category`
    category: str = ""


def _best_reach(reading: Reading) -> tuple[str, dict[int, float], dict[int, float]]:
    """The best induction head, its score by distance to the earlier copy and the spread of each, where the pass read
    the repeats by distance (`REACH`) beside the repeated tokens ({} otherwise: a quick pass reads only the
    longest)."""
    best = reading.results.best("induction")
    reach = reading.reach.get(best[0], {}) if best is not None else {}
    if len(reach) < 2:
        return "", {}, {}
    return best[0], reach, reading.results.reach("_spread").get(best[0], {})


def _repeated_lines(reading: Reading) -> list[str]:
    """How far back the best induction head copies, and the in-context gain, with its spread and what it means."""
    lines = []
    best, reach, spreads = _best_reach(reading)
    if reach and max(reach.values()) >= CLOSE * needed(None):  # some distance copies
        far, near = reach[max(reach)], max(reach.values())
        shape = (
            " (it copies from close by more than from far: the longest distances are the weakest)"
            if far < 0.75 * near
            else ""
        )
        by_distance = ", ".join(f"{d} tokens {with_spread(value, spreads.get(d))}" for d, value in reach.items())
        lines.append(f"{best}'s induction score by distance to the earlier copy: {by_distance}{shape}")
    numbers = reading.results.numbers
    if "in_context_gain" in numbers:
        then = reading.untrained.results.numbers if reading.untrained is not None else {}
        meaning = "the second copy is predicted {size} nats {better} than the first"
        lines.append(
            f"in-context gain on repeated random tokens: {measured(numbers, 'in_context_gain', meaning)} "
            f"(first copy {numbers['loss_first_copy']:.3f}, second {numbers['loss_second_copy']:.3f} nats/token: "
            f"a model that learnt text bets on text, so on random tokens it can lose more than a uniform guess would, "
            f"the log of its vocabulary's size{_then(then, 'in_context_gain')})"
        )
    return lines


def _reach_scalars(reading: Reading) -> Scalars:
    """The best induction head's score at each distance, and its spread."""
    _, reach, spreads = _best_reach(reading)
    scalars = {f"heads/induction/best_at_{d:02d}": value for d, value in reach.items()}
    return scalars | {f"heads/induction/best_at_{d:02d}_spread": spreads.get(d) for d in reach}


def _text_lines(reading: Reading) -> list[str]:
    """The in-context score, with its spread and what it means."""
    numbers = shown(reading.results.numbers)
    if "in_context_score" not in numbers:
        return []
    then = shown(reading.untrained.results.numbers) if reading.untrained is not None else {}
    text = reading.results.sets.get(TEXT)
    length = len(text.ids[0])
    early, late = probesets.icl_positions(length)
    where = (
        f"tokens {late.start}-{late.stop - 1} of a {length}-token context "
        f"against the same tokens at {early.start}-{early.start + late.stop - late.start - 1}"
    )
    meaning = "later in the context, tokens are predicted {size} nats {better}"
    return [
        f"in-context score on held-out text: {measured(numbers, 'in_context_score', meaning, 'nats')} ({where}, "
        f"{len(text.ids) // 2} pairs of windows{_then(then, 'in_context_score')}; the negative of Olsson et al.'s "
        f"late-minus-early loss, {-numbers['in_context_score']:+.3f})"
    ]


# The in-context score as every view shows it (the report, TensorBoard, the HParams, the JSON): nats saved later in the
# context, + better as every signed figure is, where the pass reads Olsson et al.'s late-minus-early loss.
SAVED = ("in_context_score",)


def shown(numbers: dict[str, float]) -> dict[str, float]:
    """The model's numbers as every view shows them: those of `SAVED` turned to nats saved."""
    return {name: -value if name in SAVED else value for name, value in numbers.items()}


def measured(numbers: dict, name: str, meaning: str, unit: str = "nats/token") -> str:
    """ "+0.12 ± 0.03 nats/token: the second copy is ...", `meaning` with the figure's {size} and whether it is
    {better} or worse; or "no measurable effect, +0.02 ± 0.05 nats/token" when the figure lies inside its spread."""
    figure, inside = _signed(numbers, name)
    if inside:
        return f"no measurable effect, {figure} {unit}"
    size = figure.split(" ± ")[0].lstrip("+-")  # at the figure's places
    return f"{figure} {unit}: {meaning.format(size=size, better='better' if numbers[name] > 0 else 'worse')}"


def _then(then: dict, name: str) -> str:
    if name not in then:
        return ""
    figure, inside = _signed(then, name)
    return f"; untrained {figure}" + (", no measurable effect" if inside else "")


def _signed(numbers: dict, name: str) -> tuple[str, bool]:
    """("+0.12 ± 0.03", whether the figure lies inside its spread)."""
    value, spread = numbers[name], numbers.get(f"{name}_spread")
    return with_spread(value, spread, signed=True), spread is not None and abs(value) <= spread


NO_ANSWER = (
    "the model does not prefer the clean prompts' answers over the corrupted ones' by more than the spread of that "
    "preference over the pairs"
)
HEAD_PARTS = [part for part in WATCHED_PARTS if PARTS[part].axes == LAYER_HEAD and part != "heads"]
LAYER_PARTS = [part for part in WATCHED_PARTS if PARTS[part].axes == ("layer",)]  # one figure a layer: MLPs


def carries(name: str, share: str, over: str) -> str:
    """The one way every view says which head carries an answer, and what that was measured on (`over`: "on this
    pair", "over 16 pronoun pairs, ..."): "L0H0 carries the answer most on this pair: its output, patched from the
    clean run into the corrupted one, brings back 0.65 of the logit difference"."""
    return (
        f"{name} carries the answer most {over}: its output, patched from the clean run into the corrupted one, "
        f"brings back {share} of the logit difference"
    )


def _patching_lines(reading: Reading) -> list[str]:
    """Which head carries the answer on the patched pairs, with its share and its direct attribution; then, of every
    other part the watch patches, where patching it brings back the most."""
    results, pairs = reading.results, reading.results.sets.get(PAIRS)
    best = results.best("patching")
    if best is None:
        was_measured = pairs is not None and "patching" in results.heads
        # Early in training: no answer yet for a head to carry (`patching.share_of_mean`).
        return [f"no head carries an answer yet on {pairs.about}: {NO_ANSWER}"] if was_measured else []
    name, share = best
    layer, head = parse_head(name)
    typed = reading.types.get(name)
    kind = f" ({TYPES[typed.kind].label} head)" if typed is not None and typed.kind is not None else ""
    figure = with_spread(share, results.head("patching_spread", layer, head), 2)
    lines = [
        f"{carries(name + kind, figure, f'over {pairs.about}')}; its direct attribution, the mean over the pairs, "
        f"{float(results.heads['attribution'][layer, head]):+.2f} logits"
    ]
    others = []
    for part in HEAD_PARTS:
        found = results.best(WATCHED_NAMES[part])
        if found is not None:
            spread = results.best_spread(WATCHED_NAMES[part])
            others.append(f"{found[0]}'s {PARTS[part].words} {with_spread(found[1], spread, 2)}")
    for part in LAYER_PARTS:
        for layer, (value, spread) in _per_layer(results.numbers, part).items():
            others.append(f"MLP{layer}'s output {with_spread(value, spread, 2)}")
    if others:
        lines.append(f"patched the same way, the most each other part brings back: {', '.join(others)}")
    return lines


def _per_layer(numbers: dict[str, float], part: str) -> dict[int, tuple[float, float | None]]:
    """A part patched a layer at a time, as the watch's numbers hold it: {layer: (share, spread)}."""
    name, found, layer = WATCHED_NAMES[part], {}, 0
    while f"{name}{layer}" in numbers:
        found[layer] = numbers[f"{name}{layer}"], numbers.get(f"{name}{layer}_spread")
        layer += 1
    return found


def _patching_scalars(reading: Reading) -> Scalars:
    """Every head's share (of each part the watch patches) and direct attribution, each MLP's share, and the best
    head's output share with its spread (None before there is one)."""
    results = reading.results
    best = results.best("patching")
    layers = {
        f"patching/{part}/MLP{layer}": value
        for part in LAYER_PARTS
        for layer, (value, _) in _per_layer(results.numbers, part).items()
    }
    return {
        "patching/share": results.heads.get("patching"),
        **{f"patching/{part}": results.heads.get(WATCHED_NAMES[part]) for part in HEAD_PARTS},
        "patching/attribution": results.heads.get("attribution"),
        "patching/share/best": best[1] if best is not None else None,
        "patching/share/best_spread": results.best_spread("patching"),
        **layers,
    }


STRONGEST_PATHS = 6  # paths named in the report; TensorBoard and the JSON have them all


def paths_lines(found: list, about: str) -> list[str]:
    """The strongest paths measured above their spread over the pairs `about` names, or why none is: the watch's line
    and `sample.py --patch --paths`'s."""
    if not any(path.measured for path in found):  # no sender, or no share
        return [f"no head carries an answer yet on {about}, so no path does: {NO_ANSWER}"]
    clear = sorted((path for path in found if path.clear), key=lambda path: -path.share)
    named = ", ".join(f"{path.name} {with_spread(path.share, path.spread, 2)}" for path in clear[:STRONGEST_PATHS])
    return [
        f"which head feeds which (path patching over {about}: a sender's output into one receiver's queries q, "
        f"keys k or values v, an MLP or the logits alone, the share of the logit difference it brings back, ± two "
        f"standard errors over the pairs where there are several), the strongest paths: "
        f"{named or 'none above its spread'}"
    ]


def _paths_lines(reading: Reading) -> list[str]:
    """The paths a pass read, in the report (none where it read none)."""
    read = PATHS in reading.results.counts
    return paths_lines(reading.results.paths, reading.results.sets.get(PATHS).about) if read else []


def path_scalars(reading: Reading) -> Scalars:
    """Every path's share in its sender's run, by receiver and input (paths/k/into_L1H1, paths/mlp/into_MLP0,
    paths/logits), as composition is logged; and the strongest share in the run's own."""
    found = reading.results.paths
    if not found:
        return {}
    n_layer, n_head = reading.results.heads["patching"].shape if "patching" in reading.results.heads else (0, 0)
    scalars: Scalars = {}
    for path in found:
        tag = "paths/logits" if path.input == "logits" else f"paths/{path.input}/into_{path.receiver}"
        values = scalars.setdefault(tag, torch.full((n_layer, n_head), float("nan")))
        values[parse_head(path.sender)] = path.share
    measured = [path.share for path in found if path.measured]
    return scalars | {"paths/strongest": max(measured) if measured else None}


def _pronoun_scalars(reading: Reading) -> Scalars:
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


# When a head becomes the one that carries the answer, beside when its attention formed.
PATCHING_CHARTS = {
    "share of the answer the best head's output carries": [r"patching/share/best$"],
    "share of the answer a head's output carries (activation patching), every head": [r"patching/share$"],
    **{f"share a head's {PARTS[part].words} carry, every head": [rf"patching/{part}$"] for part in HEAD_PARTS},
    **{f"share each {PARTS[part].words} carries": [rf"patching/{part}/MLP\d+$"] for part in LAYER_PARTS},
}

SHOWN: dict[str, Shown] = {
    REPEATED: Shown(
        lines=_repeated_lines,
        # The phase change: the induction score and the in-context gain jump together (a chart each: one run's lines
        # share its colour).
        charts={
            "induction, the best head": [r"heads/induction/best$"],
            "in-context gain on repeated random tokens (nats/token)": [r"heads/in_context_gain$", r"reference/none$"],
        },
        category="head types",
    ),
    REACH: Shown(
        # Its line in the report, how far back the best induction head copies, comes before the in-context gain:
        # the repeated tokens' lines say both (`_repeated_lines`).
        scalars=_reach_scalars,
        # Whether the best induction head copies from far back as well as from close by.
        charts={"best induction head's score by distance to the earlier copy": [r"heads/induction/best_at_\d+$"]},
        category="head types",
    ),
    TEXT: Shown(lines=_text_lines, scalars=lambda reading: {"heads/broad": reading.results.heads.get("broad")}),
    PRONOUN: Shown(
        scalars=_pronoun_scalars,
        charts={
            # The best head's own lines first, each on a chart of its own: the run's lines share its colour.
            "referent weight of the best head": [r"attention/referent/best$"],
            "ref > dis of the best head (how often the referent outweighs the other noun)": [r"attention/top1/best$"],
            "referent weight, every head": [r"attention/referent$"],
            "ref > dis, every head": [r"attention/top1$"],
            # The training loss (logged every log_interval steps) rather than the validation loss (5 points in the
            # demo, which smoothing bends out of shape), beside the untrained model's loss on held-out text, where it
            # starts.
            "training loss (nats/token)": [r"loss/train$", r"reference/untrained_loss$"],
            "continuation accuracy": [r"probes/continuation_accuracy$"],
        },
        category="attention heads",
    ),
    AGREEMENT: Shown(
        # Each figure of the whole model: agreement, over every context and by mention, and its share.
        scalars=lambda reading: {f"probes/{n}": reading.results.numbers.get(n) for n in PROBE_KINDS[AGREEMENT].scores},
        charts={"agreement accuracy": [r"probes/agreement_accuracy$"]},
        category="agreement",
    ),
    PAIRS: Shown(lines=_patching_lines, scalars=_patching_scalars, charts=PATCHING_CHARTS, category="patching"),
    # Then a chart per receiver and input, a line per sender (`watch.show.tensorboard.chart_layout`).
    PATHS: Shown(
        lines=_paths_lines,
        scalars=path_scalars,
        charts={"the strongest path's share": [r"paths/strongest$"]},
        category="patching",
    ),
    SENTENCES: Shown(),  # a pass keeps their patterns: the heatmaps and the attention page show them
}
