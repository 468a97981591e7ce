"""The report's words: one sign for "better" on every signed figure, removal lines that say what got worse and by how
much, heads that back each other up said so, and every term of the pronoun table explained."""

from __future__ import annotations

import re
from types import SimpleNamespace

from watch.measure.probesets import REPEATED, TEXT
from watch.measure.proofs import AblationResult
from watch.show.kinds import SHOWN
from watch.show.report import SIGNS, ablation_lines

PROBES = {"continuation_accuracy": 256}  # a share of 256 probes has a spread of its own


def _reading(numbers: dict, text_windows: int = 8, length: int = 64) -> SimpleNamespace:
    sets = {"text": SimpleNamespace(ids=[[0] * length] * text_windows)}
    results = SimpleNamespace(
        numbers=numbers,
        counts=PROBES,
        sets=SimpleNamespace(get=sets.get),
        per_head=lambda score: {},
        best=lambda score: None,
    )
    return SimpleNamespace(results=results, untrained=None, reach={})


def test_every_signed_in_context_figure_counts_nats_saved():
    reading = _reading(
        {
            "in_context_gain": 0.056,
            "in_context_gain_spread": 0.01,
            "loss_first_copy": 4.0,
            "loss_second_copy": 3.944,
            "in_context_score": -0.221,
            "in_context_score_spread": 0.02,
        }
    )
    (gain,), (score,) = (SHOWN[kind].lines(reading) for kind in (REPEATED, TEXT))
    assert "+0.056 ± 0.010 nats/token: the second copy is predicted 0.056 nats better" in gain
    assert "+0.221 ± 0.020 nats: later in the context, tokens are predicted 0.221 nats better" in score
    assert "the negative of Olsson et al.'s late-minus-early loss, -0.221" in score  # the published score, named
    assert "+ is better" in SIGNS


def _removed(heads: list[str], kind: str, numbers: dict) -> AblationResult:
    reading = SimpleNamespace(results=SimpleNamespace(numbers=numbers, counts=PROBES, per_head=lambda score: {}))
    ablation = SimpleNamespace(mode="zero")
    return AblationResult(heads, "top two by score" if len(heads) > 1 else heads[0], kind, ablation, reading)


def test_a_head_whose_removal_alone_changes_nothing_is_said_to_be_backed_up_by_its_partner():
    reading = _reading({"continuation_accuracy": 1.0})
    found = [
        _removed(["L0H3"], "pronoun", {"continuation_accuracy": 1.0}),
        _removed(["L0H0"], "pronoun", {"continuation_accuracy": 0.363}),
        _removed(["L0H0", "L0H3"], "pronoun", {"continuation_accuracy": 0.07}),
    ]
    alone, other, both = ablation_lines(reading, found).splitlines()
    # Each accuracy with its spread over the 256 probes: 256 of 256 is not taken for a certainty.
    assert re.search(
        r"removing L0H3 .* changes the continuation accuracy after the pronoun by nothing measurable \(100\.0 ± 0\.8% "
        r"-> 100\.0 ± 0\.8%, within their spreads\): no effect alone \(less than 5% of it\), because L0H0 does the "
        r"same job .* removing L0H0 and L0H3 together loses 93 ± 3% of it",
        alone,
    )
    assert other.endswith(
        "lowers the continuation accuracy after the pronoun by 63.7 points, from 100.0 ± 0.8% to 36.3 ± 6.0%"
    )
    assert "no effect alone" not in other and "no effect alone" not in both


def test_every_removal_line_says_what_got_worse_and_by_how_much_without_a_sign():
    reading = _reading({"text_loss": 2.0})
    found = [_removed(["L0H1"], "sink", {"text_loss": 2.5}), _removed(["L0H1", "L1H0"], "sink", {"text_loss": 2.01})]
    alone, both = ablation_lines(reading, found).splitlines()
    assert alone.endswith("makes the held-out loss worse by 0.500 nats/token, from 2.000 to 2.500")
    # The held-out loss has no spread: the rule for nothing measurable is stated, and what it is measured against.
    assert both.endswith(
        "changes the held-out loss by nothing measurable (less than 1% of it, the rule for a figure without a "
        "spread: 2.000 -> 2.010 nats/token)"
    )
    assert "(-" not in alone + both and "(+" not in alone + both


def test_a_pair_that_takes_less_of_the_gain_than_one_of_them_says_both_copies_got_worse():
    """The induction demo's case: removing L1H1 alone takes all of the gain; removing it with L1H0 takes 75%, because
    the first copy's loss rose too (the gain is the gap between the copies)."""
    gain = {"in_context_gain": 2.74, "in_context_gain_spread": 0.05, "loss_first_copy": 4.45, "loss_second_copy": 1.71}
    reading = _reading(gain)
    alone = {"in_context_gain": -0.28, "loss_first_copy": 4.48, "loss_second_copy": 4.76}
    both = {"in_context_gain": 0.68, "in_context_gain_spread": 0.06, "loss_first_copy": 6.36, "loss_second_copy": 5.68}
    found = [_removed(["L1H1"], "induction", alone), _removed(["L1H1", "L1H0"], "induction", both)]
    one, two = ablation_lines(reading, found).splitlines()
    assert "shrinks the in-context gain by 3.020 nats/token, from 2.740 ± 0.050 to -0.280: all of it and more" in one
    assert "less than" not in one
    assert (
        "75 ± 2% of it" in two
        and "less than removing L1H1 alone takes only because the first copy is predicted " in two
    )
    assert "(4.45 -> 6.36 nats, against 4.48 without L1H1 alone)" in two


def test_on_text_without_an_in_context_gain_a_removal_says_what_it_does_to_the_text():
    gain = {"in_context_gain": -0.088, "in_context_gain_spread": 0.1, "text_loss": 1.902}
    found = [
        _removed(["L0H3"], "previous_token", {"in_context_gain": -0.081, "text_loss": 1.933}),
        _removed(["L0H2"], "previous_token", {"in_context_gain": -0.09, "text_loss": 1.905}),
    ]
    worse, nothing = ablation_lines(_reading(gain), found).splitlines()
    assert worse == (
        "removing L0H3 (previous-token head) finds no in-context gain to take (the model has none on repeated "
        "tokens: -0.088 nats/token); it makes the held-out loss worse by 0.031 nats/token, from 1.902 to 1.933"
    )
    assert nothing.endswith(
        "it changes the held-out loss by nothing measurable (less than 1% of it, the rule for a figure without a "
        "spread: 1.902 -> 1.905 nats/token)"
    )


def test_a_previous_token_heads_removal_says_how_much_the_induction_head_it_feeds_lost():
    gain = {"in_context_gain": 2.74, "in_context_gain_spread": 0.05, "loss_first_copy": 4.45, "loss_second_copy": 1.71}
    reading = _reading(gain)
    reading.results.per_head = lambda score: {"L0H1": 0.1, "L1H1": 0.79} if score == "induction" else {}
    removed = _removed(["L0H1"], "previous_token", {**gain, "in_context_gain": -0.276})
    removed.reading.results.per_head = lambda score: {"L0H1": 0.1, "L1H1": 0.022} if score == "induction" else {}
    (line,) = ablation_lines(reading, [removed]).splitlines()
    assert line.endswith("; lowers the best induction score by 0.768, from 0.790 to 0.022 (L1H1)")


def test_a_change_inside_the_spreads_is_no_measurable_effect_and_a_share_taken_carries_its_spread():
    """A removal that moves a figure by less than the spread of the difference (the two spreads added in quadrature)
    is said to change nothing measurable, as a figure inside its spread is everywhere in the report; a share of the
    gain taken is given with the spread its two figures carry."""
    gain = {"in_context_gain": 0.3, "in_context_gain_spread": 0.1, "loss_first_copy": 4.0, "loss_second_copy": 3.7}
    reading = _reading(gain)
    reading.results.per_head = lambda score: {"induction": {"L1H1": 0.036}, "induction_spread": {"L1H1": 0.002}}.get(
        score, {}
    )
    removed = _removed(["L0H1"], "previous_token", {**gain, "in_context_gain": 0.165, "in_context_gain_spread": 0.08})
    removed.reading.results.per_head = lambda score: {
        "induction": {"L1H1": 0.034},
        "induction_spread": {"L1H1": 0.003},
    }.get(score, {})
    (line,) = ablation_lines(reading, [removed]).splitlines()
    assert (
        "shrinks the in-context gain by 0.135 nats/token, from 0.300 ± 0.100 to 0.165 ± 0.080: 45 ± 32% of it" in line
    )
    assert line.endswith(
        "; changes the best induction score by nothing measurable (0.036 ± 0.002 -> 0.034 ± 0.003, within their "
        "spreads) (L1H1)"
    )
