"""Text views of a pass's `Reading` (`watch/measure/reading.py`), for a terminal or as Markdown for TensorBoard: the
pronoun head table, the head-type table and its lines, what removing heads costs, pronoun agreement, what a query
attends to most, what fine-tuning changed and how the heads compose."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from watch.measure.composition import KINDS, ONE_LAYER_NOTE, pair_name
from watch.measure.heads import display_token, head_name, parse_head, with_spread
from watch.measure.headtypes import BROAD, BROAD_COLUMN, BROAD_MEANING, CLOSE, RULE, TYPES, needed
from watch.measure.patching import LAYER_HEAD, PARTS, Mean, Patching, by_name
from watch.measure.probesets import REPEATED, TEXT, ProbeSets
from watch.measure.pronouns import ProbeReport
from watch.measure.proofs import AblationResult
from watch.measure.reading import Reading, Results
from watch.show.heatmaps import as_array
from watch.show.kinds import SHOWN, carries

COLUMNS = ("rank", "head", "referent", "distractor", "ref > dis", "ref (no sink)", "ref > dis (no sink)")


def head_table(report: ProbeReport, *, limit: int | None = None) -> str:
    """The heads ranked best first, the best marked and any removed said so, then one line of the probe count, the
    baselines and the continuation accuracy. `limit` keeps only the first rows (that line still covers all probes)."""
    rows = [
        [
            str(rank),
            s.name + (" (removed)" if s.name in report.ablated else ""),
            _num(s.referent),
            _num(s.distractor),
            _pct(s.top1, 1),
            _num(s.referent_no_sink),
            _pct(s.top1_no_sink, 1),
        ]
        for rank, s in enumerate(report.ranked()[:limit], start=1)
    ]
    baseline, cont = report.baselines, report.continuation
    parts = [f"{report.n_probes} probes"]
    parts += [f"{name.replace('_', ' ')} {_pct(baseline[name])}" for name in ("chance", "first_noun", "nearest_noun")]
    if cont.n:
        parts.append(f"continuation accuracy {_pct(cont.accuracy)} ({cont.n_correct}/{cont.n})")
    if cont.logit_diff is not None:
        parts.append(f"logit diff {cont.logit_diff:+.2f}")
    if report.ablated:
        parts.append("ablated " + ", ".join(report.ablated))
    return "\n".join([*_table(COLUMNS, rows, marked=[0], text=(1,)), "; ".join(parts), HEAD_TABLE_LEGEND])


# Every term of the pronoun table, once, in plain words (docs/head-types.md#the-reports-words says more).
HEAD_TABLE_LEGEND = (
    "how to read it: referent and distractor are the shares of the pronoun's attention on the noun it refers to and "
    "on the other noun; ref > dis how often the referent gets more of it than the distractor (than that one other "
    "noun, not than every token); (no sink): the same with the first token left out, where small models park "
    "attention they do not use (an attention sink); chance, first noun, nearest noun: the ref > dis of a head that "
    "guesses, of one that always looks at the first noun, at the nearest; continuation accuracy how often the "
    "model's likeliest next word fits the referent; logit diff how far, on average, the model's score for the best "
    "word that fits the referent is above the best that fits the other noun (+: the right one ahead)"
)


def _table(
    columns: Sequence[str], rows: list[list[str]], *, marked: Sequence[int] = (), text: Sequence[int] = ()
) -> list[str]:
    """A table's lines, the `marked` rows starred, names (the `text` columns) left-aligned and numbers right-aligned
    so their decimal points line up."""
    table = [["", *columns], *[["*" if r in marked else "", *row] for r, row in enumerate(rows)]]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    left = {0, *(i + 1 for i in text)}

    def line(cells: list[str]) -> str:
        out = [c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    return [line(table[0]), line(["-" * w for w in widths]), *[line(row) for row in table[1:]]]


CONTINUATION = "the continuation accuracy after the pronoun"


def ablation_line(before: float, after: float, heads: Sequence[str], n: int | None = None) -> str:
    """What removing `heads` does to the continuation accuracy over `n` probes, in one line."""
    return f"removing {names(heads)} {_points(CONTINUATION, before, after, n)}"


def names(heads: Sequence[str]) -> str:
    """["L1H3", "L0H0", "L0H2"] -> "L1H3, L0H0 and L0H2"."""
    heads = list(heads)
    return heads[0] if len(heads) == 1 else ", ".join(heads[:-1]) + " and " + heads[-1]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(value: float | None, decimals: int = 0) -> str:
    return "-" if value is None else f"{100 * value:.{decimals}f}%"


def top_attended(
    pattern: torch.Tensor | np.ndarray, tokens: Sequence[str], query_pos: int, k: int = 3, *, layer: int = 0
) -> str:
    """One line per head of the `k` keys the query at `query_pos` weighs most,
    e.g. "L0H1: dog 0.88 | ball 0.09 | the 0.02". `pattern` is [head, query_pos, key_pos]."""
    pattern = as_array(pattern)
    lines = []
    for head in range(pattern.shape[0]):
        row = pattern[head, query_pos, : query_pos + 1]  # keys after the query are masked out
        # Stable sort, so equal weights keep sentence order.
        order = np.argsort(-row, kind="stable")[:k]
        cells = [f"{display_token(tokens[i], space_mark='')} {row[i]:.2f}" for i in order]
        lines.append(f"{head_name(layer, head)}: " + " | ".join(cells))
    return "\n".join(lines)


# --- head types --------------------------------------------------------------------------------------


def _columns(reading: Reading) -> list[str]:
    """The types the table shows: those measured, and "n/a" those whose probe set could not be made (the reason is
    said below the table); a type of a probe file not given has no column."""
    missing = reading.results.sets.missing
    return [kind for kind, t in TYPES.items() if kind in reading.type_scores or t.probe_set in missing]


def type_table(reading: Reading) -> str:
    """Every head's type and type scores, each with the untrained model's in brackets; "n/a" where a
    score could not be measured (no held-out text, a block too short for repeated tokens); a removed head said so."""
    kinds, removed = _columns(reading), reading.results.ablated
    rows = []
    for name, t in reading.types.items():
        broad = reading.results.head(BROAD, t.layer, t.head)
        rows.append(
            [
                name + (" (removed)" if name in removed else ""),
                _label(t.kind),
                *(_type_cell(reading, kind, t.layer, t.head) for kind in kinds),
                "n/a" if broad is None else f"{broad:.2f}",
            ]
        )
    columns = ("head", "type", *(TYPES[kind].column for kind in kinds), BROAD_COLUMN)
    return "\n".join(_table(columns, rows, text=(0, 1)))


def measured_on(sets: ProbeSets) -> str:
    """Which probe set each column of the type table is read from, for the table's header: "previous, first token,
    itself, k back, spread out: 512 windows of 32 tokens ...; duplicate, induction: 128 sequences ..."."""
    parts = []
    for kind, probe_set in sets.sets.items():
        columns = [t.column for t in TYPES.values() if t.probe_set == kind] + ([BROAD_COLUMN] if kind == TEXT else [])
        if columns:
            parts.append(f"{', '.join(columns)}: {probe_set.about}")
    return "; ".join(parts)


def type_legend(reading: Reading) -> str:
    """How to read the type table, in a few lines: what its numbers are, the rule for a type, each column."""
    meanings = "; ".join(f"{TYPES[kind].column}: {TYPES[kind].meaning}" for kind in _columns(reading))
    repeated = reading.results.sets.get(REPEATED)  # the random sequences: which tokens they are drawn from
    return (
        f"how to read it: each score is the share of a head's attention that goes where its column says (0 to 1), "
        f"the same head before training in brackets; {RULE}; {SIGNS}.\n"
        f"  {meanings}; {BROAD_COLUMN}: {BROAD_MEANING}"
        + (f"\n  random tokens: {repeated.draw_rule or 'every token drawn'}; {SPREAD}" if repeated is not None else "")
        + f"\n  every term of this report in plain words: {TERMS_PAGE}"
    )


# What the ± beside a figure means (`watch.measure.scores.spread`; a share of probes: `_share_spread`).
SPREAD = (
    "± is two standard errors of the mean over the sequences (of a share of probes: over the probes): the figure of "
    "all possible draws lies within it 19 times in 20"
)


TERMS_PAGE = "docs/head-types.md#the-reports-words"


def _type_cell(reading: Reading, kind: str, layer: int, head: int) -> str:
    """ "0.91 (0.05)": a head's score of one type and, in brackets, the untrained model's."""
    if kind not in reading.type_scores:
        return "n/a"
    value = f"{float(reading.type_scores[kind][layer, head]):.2f}"
    then = reading.untrained.type_scores if reading.untrained is not None else {}
    if kind in then:
        value += f" ({float(then[kind][layer, head]):.2f})"
    if kind == "positional" and reading.offsets is not None:
        value += f" k={int(reading.offsets[layer, head])}"
    return value


# The one sign convention of every signed figure in the report, and the unit of a loss.
SIGNS = (
    "in every signed figure below, + is better (nats/token saved, accuracy points gained); a nat is the unit of a "
    "loss, the natural logarithm of 1/(the probability given to the right token): 0.69 nats less is twice the "
    "probability"
)


def type_lines(reading: Reading, since: dict[str, str] | None = None) -> str:
    """One line per head type: its heads (since when, from `since`), or how close the best head came; then the
    lines of each kind of probe set (`watch.show.kinds.SHOWN`)."""
    trained, then = reading.type_scores, reading.untrained
    lines = []
    for kind in (kind for kind in TYPES if kind in trained):
        heads = reading.typed.get(kind, [])
        if heads:
            listed = ", ".join(
                f"{t.name} {_type_figure(reading, kind, t.layer, t.head)}{_untrained(reading, kind, t.layer, t.head)}"
                for t in heads
            )
            when = f", {since[kind]}" if since and kind in since else ""
            lines.append(f"{TYPES[kind].label} heads: {listed}{when}")
            continue
        layer, head = divmod(int(torch.nan_to_num(trained[kind], nan=-1.0).argmax()), trained[kind].shape[1])
        value = float(trained[kind][layer, head])
        bar = needed(float(then.type_scores[kind][layer, head]) if then and kind in then.type_scores else None)
        figure = _type_figure(reading, kind, layer, head)
        if value >= CLOSE * bar:
            lines.append(
                f"no {TYPES[kind].label} head yet, but {head_name(layer, head)} is close: {figure}, where a type "
                f"needs {bar:.2f}{_untrained(reading, kind, layer, head)}"
            )
        else:
            lines.append(
                f"no {TYPES[kind].label} head (best {head_name(layer, head)} {figure}"
                f"{_untrained(reading, kind, layer, head, bracket=False)})"
            )
    for name, shown in SHOWN.items():
        if name in reading.results.sets.sets:  # the kinds the pass read
            lines += shown.lines(reading)
    return "\n".join(lines)


def _type_figure(reading: Reading, kind: str, layer: int, head: int) -> str:
    """A head's score of a type, "0.41"; "0.952 ± 0.004" where the score has a spread (`{kind}_spread`: read from
    random sequences, how far another draw of them could move it)."""
    spread = reading.results.head(f"{kind}_spread", layer, head)
    return with_spread(float(reading.type_scores[kind][layer, head]), spread, 2 if spread is None else 3)


def _untrained(reading: Reading, kind: str, layer: int, head: int, *, bracket: bool = True) -> str:
    """ " (untrained 0.05)", or ", untrained 0.050 ± 0.003" with `bracket` False: the same head's score in the untrained
    model, with its spread where it has one; "" where the pass was read against none."""
    then = reading.untrained
    if then is None or kind not in then.type_scores:
        return ""
    value = f"untrained {_type_figure(then, kind, layer, head)}"
    return f" ({value})" if bracket else f", {value}"


def ablation_lines(reading: Reading, found: Sequence[AblationResult]) -> str:
    """What removing each set of heads cost, one line each, in plain words and the measure that fits their kind."""
    results = reading.results
    lines = []
    for result in (r for r in found if r.kind != "copying"):  # those make up `route_lines`
        after = result.reading.results
        costs = [_change(result, results)] if result.tested_on else []
        fed = TYPES[result.kind].feeds if result.kind in TYPES else None
        if fed is not None:  # a circuit: the best head left of the type its heads feed, before and after
            old, new = ({n: v for n, v in r.per_head(fed).items() if n not in result.heads} for r in (results, after))
            name = max(old, key=old.get) if old and new else None
            if name:
                spreads = tuple(r.per_head(f"{fed}_spread").get(name) for r in (results, after))
                label = f"the best {TYPES[fed].label} score"
                costs.append(f"{_moves(label, old[name], new[name], 3, spreads)} ({name})")
        costs = [c for c in costs if c]
        if costs:
            why = _backed_up(result, found, results) + _less_than_alone(result, found, results)
            lines.append(f"{_removing(result)} {'; '.join(costs)}{why}")
    return "\n".join(lines)


NO_EFFECT, AN_EFFECT = 0.05, 0.2  # the share of a measure lost that counts as none, and as a real effect


def _share_spread(share: float | None, n: int | None) -> float | None:
    """Two standard errors of a share of `n` probes, of (hits + 1) / (n + 2) in place of the share, so that 256 of 256
    is not taken for a certainty; None without a count."""
    if share is None or not n:
        return None
    smoothed = (share * n + 1) / (n + 2)
    return 2 * math.sqrt(smoothed * (1 - smoothed) / n)


def _spread_of(results: Results, key: str) -> float | None:
    """The spread of the model's figure `key`: its own (`{key}_spread`, read from random sequences or windows), that
    of a share of probes for an accuracy, or None (the held-out loss has none)."""
    if f"{key}_spread" in results.numbers:
        return results.numbers[f"{key}_spread"]
    return _share_spread(results.numbers.get(key), results.counts.get(key)) if key.endswith("accuracy") else None


def _change(result: AblationResult, before: Results) -> str:
    """What removing `result.heads` did to the measure they are tested on, in words, always "by how much, from what
    to what": "shrinks the in-context gain by 3.83 nats/token, from 3.01 to -0.82: all of it and more (first copy
    ...)"; "" when it was not measured. A model with no in-context gain to lose is said to have none, and the held-out
    loss says what removing the heads does to its text instead."""
    key, after = result.tested_on[0], result.reading.results
    old, new = before.numbers.get(key), after.numbers.get(key)
    if old is None or new is None:
        return ""
    if key == "text_loss":
        return _loss_change(old, new)
    spreads = (_spread_of(before, key), _spread_of(after, key))
    if key != "in_context_gain":
        return _moves(CONTINUATION, old, new, 1, spreads, percent=True)
    if old <= 0 or (spreads[0] is not None and old <= spreads[0]):  # nothing to take: what it does to text instead
        text = f"finds no in-context gain to take (the model has none on repeated tokens: {old:.3f} nats/token)"
        loss = _loss_change(before.numbers.get("text_loss"), after.numbers.get("text_loss"))
        return text + (f"; it {loss}" if loss else "")
    text = _moves("the in-context gain", old, new, 3, spreads, "nats/token", ("shrinks {}", "grows {}"))
    if not text.startswith("changes"):  # a change beyond the spreads: how much of the gain it is
        text += f": {_share_taken(*_cost(result, before))}"
    keys = ("loss_first_copy", "loss_second_copy")
    if all(k in before.numbers and k in after.numbers for k in keys):  # a removed copying head can worsen both copies
        (first, second), (first_after, second_after) = ([r.numbers[k] for k in keys] for r in (before, after))
        text += f" (first copy {first:.2f} -> {first_after:.2f}, second {second:.2f} -> {second_after:.2f} nats)"
    return text


UNMEASURABLE = 0.01  # a change of the held-out loss below this share of it is said to be nothing measurable


def _loss_change(old: float | None, new: float | None) -> str:
    """ "makes the held-out loss worse by 0.500 nats/token, from 2.000 to 2.500": how much worse the model predicts
    the next token of held-out text; a change below UNMEASURABLE of the loss, which has no spread, is said to be
    none; "" when not measured."""
    if old is None or new is None:
        return ""
    if abs(new - old) < UNMEASURABLE * abs(old):
        return (
            f"changes the held-out loss by nothing measurable (less than {UNMEASURABLE:.0%} of it, the rule for a "
            f"figure without a spread: {old:.3f} -> {new:.3f} nats/token)"
        )
    return _moves("the held-out loss", old, new, 3, (None, None), "nats/token", ("makes {} better", "makes {} worse"))


def _moves(
    label: str,
    old: float,
    new: float,
    decimals: int,
    spreads: tuple[float | None, float | None] = (None, None),
    unit: str = "",
    verbs: tuple[str, str] = ("lowers {}", "raises {}"),
    *,
    percent: bool = False,
) -> str:
    """ "shrinks the in-context gain by 3.830 nats/token, from 3.010 ± 0.050 to -0.820 ± 0.040": the first of `verbs`
    when the figure falls, the second when it rises, the amount always positive, each figure with its spread: the one
    way every removal line says how much (a share in points, with `percent`). A change not above the spread of the
    difference of the two (their spreads added in quadrature) is "changes {label} by nothing measurable"."""
    scale = 100 if percent else 1
    was, now = (
        with_spread(scale * v, None if e is None else scale * e, decimals) + ("%" if percent else "")
        for v, e in zip((old, new), spreads, strict=True)
    )
    noise = math.hypot(*(e or 0.0 for e in spreads))
    if round(scale * abs(new - old), decimals) == 0 or abs(new - old) <= noise:
        return f"changes {label} by nothing measurable ({was} -> {now}{', within their spreads' if noise else ''})"
    amount = f"{scale * abs(new - old):.{decimals}f} {'points' if percent else unit}".rstrip()
    return f"{verbs[new > old].format(label)} by {amount}, from {was} to {now}"


def _cost(result: AblationResult, before: Results) -> tuple[float, float | None] | None:
    """The share of what a kind of head is tested on that removing `result.heads` lost (0: nothing; of a figure where
    lower is better, the share it grew by), with its spread from the spreads of the figures before and after (None
    where they have none); None where either was not measured, or was 0."""
    key, higher = result.tested_on or (None, True)
    after = result.reading.results
    old, new = before.numbers.get(key), after.numbers.get(key)
    if old is None or new is None or old == 0:
        return None
    lost = (old - new) / abs(old) if higher else (new - old) / abs(old)
    spreads = _spread_of(before, key), _spread_of(after, key)
    return lost, None if None in spreads else math.hypot(spreads[1] / old, new * spreads[0] / old**2)


def _percent(cost: tuple[float, float | None]) -> str:
    """ "93 ± 4%": a share lost, with its spread."""
    return with_spread(100 * cost[0], None if cost[1] is None else 100 * cost[1], 0) + "%"


def _backed_up(result: AblationResult, found: Sequence[AblationResult], before: Results) -> str:
    """For a head whose removal alone changes nothing while removing it with others of its kind does: that the
    heads back each other up, in plain words, with what removing them together costs."""
    alone = _cost(result, before)
    if len(result.heads) != 1 or alone is None or abs(alone[0]) >= NO_EFFECT:
        return ""
    together = [
        g
        for g in found
        if g.kind == result.kind
        and len(g.heads) > 1
        and result.heads[0] in g.heads
        and (_cost(g, before) or (0.0,))[0] >= AN_EFFECT
    ]
    if not together:
        return ""
    group = together[0]
    others = names([h for h in group.heads if h != result.heads[0]])
    return (
        f": no effect alone (less than {NO_EFFECT:.0%} of it), because {others} "
        f"{'does' if len(group.heads) == 2 else 'do'} the same job and "
        f"make{'s' if len(group.heads) == 2 else ''} up for it; removing {names(group.heads)} together loses "
        f"{_percent(_cost(group, before))} of it (the heads back each other up)"
    )


def _less_than_alone(result: AblationResult, found: Sequence[AblationResult], before: Results) -> str:
    """For heads removed together that take less of the in-context gain than one of them removed alone: why. The gain
    is the gap between the two copies' losses; without both heads the first copy is predicted worse too, so the gap
    shrinks less even though the model does worse on both copies."""
    together = _cost(result, before)
    if len(result.heads) < 2 or together is None or (result.tested_on or ("",))[0] != "in_context_gain":
        return ""
    alone = [
        (cost[0], r)
        for r in found
        if r.kind == result.kind and len(r.heads) == 1 and r.heads[0] in result.heads
        if (cost := _cost(r, before)) is not None
    ]
    if not alone:
        return ""
    most, single = max(alone, key=lambda item: item[0])
    old, new, new_alone = (
        r.numbers.get("loss_first_copy") for r in (before, result.reading.results, single.reading.results)
    )
    if most - together[0] < NO_EFFECT or None in (old, new, new_alone) or new - old <= new_alone - old:
        return ""
    return (
        f"; less than removing {single.heads[0]} alone takes only because the first copy is predicted worse too "
        f"({old:.2f} -> {new:.2f} nats, against {new_alone:.2f} without {single.heads[0]} alone): the gain is the gap "
        f"between the copies, and without {names(result.heads)} both copies are predicted worse"
    )


def type_report(reading: Reading, found: Sequence[AblationResult], since: dict[str, str] | None = None) -> str:
    """Every part of the head-type report, in the order sample.py --heads and the end of a run print them."""
    missing = reading.results.sets.missing.values()
    parts = [type_table(reading), type_legend(reading), type_lines(reading, since), *(f"({why})" for why in missing)]
    costs = ablation_lines(reading, found)
    return "\n".join(parts + ([costs] if costs else []) + route_lines(reading, found))


def route_lines(reading: Reading, found: Sequence[AblationResult]) -> list[str]:
    """When the model copies without an induction head (`watch.measure.proofs.copying_route`): the heads whose
    removal takes the most of the in-context gain, where each looks, and how to try for the textbook circuit."""
    copying = [p for p in found if p.kind == "copying"]
    if not copying:
        return []
    numbers = reading.results.numbers
    gain = with_spread(numbers["in_context_gain"], numbers.get("in_context_gain_spread"), 2)
    taken = sorted(((_cost(p, reading.results), p.heads[0], p.looks) for p in copying), key=lambda t: -t[0][0])
    carriers = [t for t in taken if t[0][0] >= AN_EFFECT][:3] or taken[:1]
    lines = [
        f"no induction head, yet the second copy is predicted {gain} nats better than the first: the "
        f"model copies by another route. The heads that carry the gain (each removed alone), and where they "
        f"look from the second copy:"
    ]
    lines += [
        f"  {name}: removing it takes {_percent(cost)} of the gain; it looks {looks}" for cost, name, looks in carriers
    ]
    lines.append(
        "the textbook circuit (a previous-token head feeding an induction head in the next layer) usually "
        "forms on another run: try another --seed, or a longer warm-up (--warmup_iters)"
    )
    return lines


def _share_taken(taken: float, spread: float | None) -> str:
    """How much of a positive figure removing heads took away (`_cost`), in words, a share with its spread."""
    if taken > 1.05:
        return "all of it and more"
    if taken >= 0.95:
        return "all of it"
    if taken >= 0.05:
        return f"{_percent((taken, spread))} of it"
    if taken > -0.05:
        return "almost none of it"
    return f"none of it; it grows by {_percent((-taken, spread))}"


def _points(label: str, old: float | None, new: float | None, n: int | None = None) -> str:
    """ "lowers {label} by 91.0 points, from 99.6 ± 0.8% to 8.6 ± 3.5%" for a share of `n` probes (each with its
    spread, `_share_spread`); "" when either is not known."""
    if old is None or new is None:
        return ""
    spreads = (_share_spread(old, n), _share_spread(new, n))
    return _moves(label, old, new, 1, spreads, percent=True)


def _removing(result: AblationResult) -> str:
    """ "removing L1H3 (previous-token head)": the heads, why them ("the two highest induction scores", ...), and
    how they were removed when that was not zero-ablation."""
    label = TYPES[result.kind].label if result.kind in TYPES else None
    if label is None or result.kind == "pronoun" and result.label == "best":
        why = {
            "pronoun": "the best pronoun head",
            "most_selective": "the most selective head",
            "name_readers": "the heads that read the name",
        }.get(result.kind, result.kind.replace("_", " "))
    elif len(result.heads) == 1:
        why = f"{label} head"
    elif result.label.startswith("top"):
        why = f"the two highest {label} scores"
    else:
        why = f"all {len(result.heads)} {label} heads"
    their = "their" if len(result.heads) > 1 else "its"
    how = "" if result.ablation.mode == "zero" else f", replaced by {their} mean output"
    return f"removing {names(result.heads)} ({why}{how})"


# --- pronoun agreement ------------------------------------------------------------------------------


def agreement_lines(reading: Reading, ablations: Sequence[AblationResult]) -> str:
    """Pronoun agreement and what reads it, one finding a line."""
    a = reading.agreement
    if a is None:
        return ""
    mentions = ", ".join(f"{m} mention {v:.3f}" for m, v in a.by_mention.items())
    lines = [
        f"pronoun agreement on {a.n} single-person contexts: {a.accuracy:.3f}" + (f" ({mentions})" if mentions else "")
    ]
    weights = reading.results.per_head("name_reading")
    top = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    if top:
        lines.append(
            "weight on the name from the position before the pronoun: "
            + ", ".join(f"{name} {weight:.2f}" for name, weight in top)
        )
    selective = reading.pronouns.most_selective if reading.pronouns is not None else None
    if selective is not None:
        lines.append(
            f"most selective head at the pronoun: {selective.name}, ref > dis {100 * selective.top1:.1f}% "
            f"(referent {selective.referent:.3f}, distractor {selective.distractor:.3f})"
        )
    for ab in ablations:
        line = f"{_removing(ab)} {_points('agreement', a.accuracy, ab.reading.agreement.accuracy, a.n)}"
        top1 = ab.best_top1_left
        if top1 is not None and selective is not None:
            gap = 100 * (top1 - selective.top1)
            than = f"{abs(gap):.1f} points {'below' if gap < 0 else 'above'}" if round(gap, 1) else "the same as"
            line += f"; the best ref > dis among the heads left is {100 * top1:.1f}% ({than} {selective.name}'s)"
        lines.append(line)
    return "\n".join(lines)


# --- what fine-tuning changed ---------------------------------------------------------------------


def _label(kind: str | None) -> str:
    return TYPES[kind].label if kind else "-"


def changed_heads(reading: Reading) -> list[str]:
    """The heads whose type fine-tuning changed (gained, lost or another), in layer order."""
    return [name for name, head in reading.types.items() if head.kind != reading.before.types[name].kind]


def before_table(reading: Reading) -> str:
    """The heads with a type before fine-tuning or now (changed ones marked): each type before and now, and each
    type score as "before -> now"; "" when no head has a type, before or now."""
    before = reading.before
    kinds = [kind for kind in TYPES if kind in reading.type_scores and kind in before.type_scores]
    rows, marked = [], []  # marked: the heads whose type changed
    for name, head in reading.types.items():
        was = before.types[name].kind
        if head.kind is None and was is None:
            continue
        if head.kind != was:
            marked.append(len(rows))
        scores = [
            f"{float(before.type_scores[kind][head.layer, head.head]):.2f} -> "
            f"{float(reading.type_scores[kind][head.layer, head.head]):.2f}"
            for kind in kinds
        ]
        rows.append([name, _label(was), _label(head.kind), *scores])
    if not rows:
        return ""
    columns = ("head", "before fine-tuning", "now", *(TYPES[kind].label for kind in kinds))
    return "\n".join(_table(columns, rows, marked=marked, text=(0, 1, 2)))


def changes_line(reading: Reading) -> str:
    """Which heads' types fine-tuning changed, in one line."""
    changed = changed_heads(reading)
    if not changed:
        typed = sum(head.kind is not None for head in reading.types.values())
        return f"fine-tuning changed no head's type ({typed} of {len(reading.types)} heads have one)"
    shown = ", ".join(
        f"{name} {_label(reading.before.types[name].kind)} -> {_label(reading.types[name].kind)}"
        for name in changed[:8]
    )
    more = f" and {len(changed) - 8} more" if len(changed) > 8 else ""
    return f"fine-tuning changed the type of {len(changed)} of {len(reading.types)} heads: {shown}{more}"


def type_labels(reading: Reading) -> dict[str, str]:
    """The attention page's head labels: {"L1H3": "induction"} for each head with a type, and for a fine-tune,
    where fine-tuning changed it, what it was ("induction (before fine-tuning: -)")."""
    labels = {}
    for name, head in reading.types.items():
        was = reading.before.types[name].kind if reading.before is not None else head.kind
        if head.kind != was:
            labels[name] = f"{_label(head.kind)} (before fine-tuning: {_label(was)})"
        elif head.kind:
            labels[name] = TYPES[head.kind].label
    return labels


# --- composition ------------------------------------------------------------------------------------

COMPOSITION_TOP = 3  # pairs shown per kind; the JSON and TensorBoard have them all


def composition_lines(reading: Reading) -> str:
    """Per kind the pairs that compose most, the untrained model's score in brackets, then where each
    induction head's keys read from; one line for a one-layer model."""
    found, types = reading.composition, reading.types
    if found is None:
        return ONE_LAYER_NOTE
    untrained = reading.untrained.composition if reading.untrained is not None else None
    example = max(found.pairs["K"], key=found.pairs["K"].get)  # a pair of this model's, to read the names by
    writer, reader = example.split("->")
    lines = [
        f"composition of the weights (Elhage et al. 2021): how much a head reads what an earlier head writes, 0 to 1 "
        f"({example}: {writer}'s output as {reader} reads it, in its queries Q, keys K or values V), the "
        f"{COMPOSITION_TOP} highest pairs of each kind; the untrained model's in brackets:"
    ]
    for kind in KINDS:
        before = untrained.pairs[kind] if untrained is not None else {}
        top = sorted(found.pairs[kind].items(), key=lambda item: -item[1])[:COMPOSITION_TOP]
        shown = [f"{name} {value:.2f}" + (f" ({before[name]:.2f})" if name in before else "") for name, value in top]
        lines.append(f"  {kind}: " + ", ".join(shown))
    before = untrained.pairs["K"] if untrained is not None else {}
    for head in (t for t in types.values() if t.kind == "induction"):
        source, value = found.sources("K", (head.layer, head.head))[0]
        kind = types[source].kind if source in types else None
        was = before.get(pair_name(source, head.name))
        lines.append(
            f"induction head {head.name} reads its keys most from {source}"
            + (f" ({TYPES[kind].label})" if kind else "")
            + f": K-composition {value:.2f}"
            + (f", untrained {was:.2f}" if was is not None else "")
        )
    return "\n".join(lines)


def patching_report(found: Patching, tokens: Sequence[str], answer: str, wrong: str) -> str:
    """One pair's activation patching, attribution and logit lens for a learner: which heads carry the answer, in
    words and with their share, then every head's figures, a line for each of its inputs and the MLPs, the residual
    stream, the attribution and the lens."""
    shown = [repr(display_token(t, space_mark="")) for t in tokens]
    shares = found.shares
    heads = shares["heads"]
    lines = [
        f"right answer {answer!r}, wrong {wrong!r}: the logit difference is {found.clean_diff:+.2f} on the clean "
        f"prompt, {found.corrupted_diff:+.2f} on the corrupted one",
        "patching copies one part of the clean run into the corrupted run: 1.00 brings the clean difference all back,"
        " 0.00 none of it",
    ]
    if not found.measured:
        lines.append(
            "not measured: the clean prompt's difference is not above the corrupted one's by enough for a part to "
            "carry (docs/patching.md)"
        )
        return "\n".join(lines)
    for n, (name, share) in enumerate(found.carriers()[:3]):
        layer, head = parse_head(name)
        pos = int(shares["positions"][layer, head].argmax())
        said = carries(name, f"{share:.2f}", "on this pair") if n == 0 else f"then {name}: {share:.2f}"
        lines.append(
            f"{said}, most of it at {shown[pos]} ({float(shares['positions'][layer, head, pos]):.2f}); where it looks "
            f"alone (its pattern) {float(shares['patterns'][layer, head]):.2f}"
        )
    if not found.carriers():
        lines.append(f"no head alone carries it: the most any head's output brings back is {float(heads.max()):.2f}")
    columns = [part for part in shares if PARTS[part].axes == LAYER_HEAD]  # the output, pattern, queries, ...
    rows = [
        [head_name(layer, head)]
        + [f"{float(shares[part][layer, head]):+.2f}" for part in columns]
        + [f"{float(found.attribution['heads'][layer, head]):+.2f}"]
        for layer in range(heads.shape[0])
        for head in range(heads.shape[1])
    ]
    words = ["head", *(PARTS[part].words + (" patched" if part == "heads" else "") for part in columns)]
    lines += _table([*words, "direct attribution (logits)"], rows, text=(0,))
    lines += _layer_lines(shares)
    for layer in range(shares["residual"].shape[0]):
        carried = [f"{shown[pos]} {float(v):.2f}" for pos, v in enumerate(shares["residual"][layer]) if abs(v) >= 0.1]
        lines.append(f"residual stream entering layer {layer}: carried at {', '.join(carried) or 'no one position'}")
    attributed = found.attribution
    mlps = by_name(attributed["mlps"]) if attributed["mlps"] is not None else {}
    parts = {**by_name(attributed["heads"]), **mlps, "embeddings": float(attributed["embeddings"])}
    largest = sorted(parts.items(), key=lambda item: -abs(item[1]))[:5]
    lines.append(
        "direct logit attribution on this pair (clean run, what each part writes, through the final norm, onto right "
        "minus wrong): " + ", ".join(f"{name} {value:+.2f}" for name, value in largest)
    )
    lens = "; ".join(
        f"after layer {layer}: rank {rank} (p {probability:.2f})"
        for layer, (rank, probability) in enumerate(found.lens)
    )
    lines.append(
        f"logit lens, {answer!r} read from the residual stream as if it were the last (rank 1: its top token): {lens}"
    )
    return "\n".join(lines)


def _layer_lines(shares: dict[str, torch.Tensor], spreads: dict[str, torch.Tensor] | None = None) -> list[str]:
    """A line for each part patched a layer at a time (each MLP's output): its shares, highest first (with its spread,
    where there is one)."""
    lines = []
    for part in (part for part in shares if PARTS[part].axes == ("layer",)):
        values = shares[part].tolist()
        spread = spreads[part].tolist() if spreads and part in spreads else [None] * len(values)
        order = sorted(range(len(values)), key=lambda layer: -values[layer])
        listed = ", ".join(f"MLP{layer} {with_spread(values[layer], spread[layer], 2)}" for layer in order)
        lines.append(f"each {PARTS[part].words}, patched at every position: {listed}")
    return lines


def mean_report(mean: Mean) -> str:
    """Several pairs together, by the one rule: the share of their mean logit difference each part carries, with its
    spread, or why none is measured."""
    gap = f"{with_spread(mean.gap, mean.gap_spread, 2, signed=True)} logits"
    if not mean.measured:
        return (
            f"all {mean.pairs} pairs together: the mean gap between the clean and the corrupted difference is {gap}, "
            f"not above its spread: no share is measured (the model does not tell the clean prompts from the "
            f"corrupted ones)"
        )
    lines = [f"all {mean.pairs} pairs together (the share of their mean logit difference, mean gap {gap}):"]
    for part in (part for part in mean.shares if PARTS[part].axes == LAYER_HEAD):
        values = torch.nan_to_num(mean.shares[part], nan=float("-inf"))
        layer, head = divmod(int(values.argmax()), values.shape[1])
        share = with_spread(float(mean.shares[part][layer, head]), float(mean.spreads[part][layer, head]), 2)
        if part == "heads":
            lines.append(carries(head_name(layer, head), share, f"over the {mean.pairs} pairs"))
        else:
            lines.append(
                f"patching a head's {PARTS[part].words} brings back the most at {head_name(layer, head)}: {share}"
            )
    return "\n".join(lines + _layer_lines(mean.shares, mean.spreads))
