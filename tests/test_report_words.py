"""The report's words: one sign for "better" on every line, and heads that back each other up said so."""

from __future__ import annotations

import re
from types import SimpleNamespace

from watch.measure.probesets import REPEATED, TEXT
from watch.measure.proofs import AblationResult
from watch.measure.reading import PROBE_KINDS
from watch.show.report import SIGNS, ablation_lines


def _reading(numbers: dict, text_windows: int = 8, length: int = 64) -> SimpleNamespace:
    sets = {"text": SimpleNamespace(ids=[[0] * length] * text_windows)}
    results = SimpleNamespace(
        numbers=numbers, sets=SimpleNamespace(get=sets.get), per_head=lambda score: {}, best=lambda score: None
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
    (gain,), (score,) = (PROBE_KINDS[kind].lines(reading) for kind in (REPEATED, TEXT))
    assert "+0.056 ± 0.010 nats/token: the second copy is predicted 0.056 nats better" in gain
    assert "+0.221 ± 0.020 nats: later in the context, tokens are predicted 0.221 nats better" in score
    assert "Olsson et al.'s late-minus-early loss, -0.221" in score  # the published score, named as such
    assert "+ is better" in SIGNS


def _removed(heads: list[str], kind: str, numbers: dict) -> AblationResult:
    reading = SimpleNamespace(results=SimpleNamespace(numbers=numbers, per_head=lambda score: {}))
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
    assert re.search(
        r"removing L0H3 .* from 1\.000 to 1\.000 \(\+0\.0 points\): no effect alone, because L0H0 "
        r"does the same job .* removing L0H0 and L0H3 together loses 93% of it",
        alone,
    )
    assert "no effect alone" not in other and "no effect alone" not in both


def test_a_head_that_matters_alone_gets_no_backup_line_and_loss_figures_count_nats_saved():
    reading = _reading({"text_loss": 2.0})
    found = [_removed(["L0H1"], "sink", {"text_loss": 2.5}), _removed(["L0H1", "L1H0"], "sink", {"text_loss": 3.0})]
    line = ablation_lines(reading, found).splitlines()[0]
    assert line.endswith("raises the held-out loss from 2.000 to 2.500 nats (-0.500)")
