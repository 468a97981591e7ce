"""How far back an induction head copies from, and what the report says when a model copies without one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from watch.measure.capture import capture_from_patterns
from watch.measure.probesets import REACH, REPEATED, ProbeSets, repeated_tokens, repeats_by_distance
from watch.measure.proofs import AblationResult, where_it_looks
from watch.measure.reading import tally
from watch.show.report import route_lines


def test_repeats_at_each_distance_below_the_repeated_sets_length_share_one_row():
    made = repeats_by_distance(range(10, 60), 64)  # L = 32: the distances below it, side by side
    assert made.items[0] == ((0, 4), (8, 8), (24, 16)) and {len(row) for row in made.ids} == {56}
    for row in made.ids:
        for start, d in made.items[0]:
            assert row[start : start + d] == row[start + d : start + 2 * d]
    assert [d for _, d in repeats_by_distance(range(10, 60), 32).items[0]] == [4, 8]  # L = 16
    assert repeats_by_distance(range(10, 60), 16) is None  # too short for any


def _looking_back(ids: list[list[int]], distance_of) -> list[list[torch.Tensor]]:
    """Patterns of one layer, one head, that put all of each query's weight `distance_of(query)` tokens back."""
    out = []
    for row in ids:
        pattern = torch.zeros(1, len(row), len(row))
        for query in range(len(row)):
            pattern[0, query, max(0, query - distance_of(query))] = 1.0
        out.append([pattern])
    return out


def test_a_head_that_looks_where_an_induction_head_does_scores_one_at_every_distance():
    pool = range(100, 164)
    sets = ProbeSets({REPEATED: repeated_tokens(pool, 64), REACH: repeats_by_distance(pool, 64)})
    segments = sets.get(REACH).items[0]

    def induction_reach(query: int) -> int:  # one token after the earlier copy: d - 1 back in a repeat of d
        return next(d - 1 for start, d in segments if start <= query < start + 2 * d)

    logits = [torch.zeros(64, 200)] * len(sets.get(REPEATED))  # the in-context gain reads them: none to gain
    captured = [
        capture_from_patterns(sets.get(REPEATED), _looking_back(sets.get(REPEATED).ids, lambda q: 31), logits),
        capture_from_patterns(sets.get(REACH), _looking_back(sets.get(REACH).ids, induction_reach)),
    ]
    results = tally(captured, sets)
    assert results.reach()["L0H0"] == pytest.approx({4: 1.0, 8: 1.0, 16: 1.0, 32: 1.0})

    # A head that copies only from close by: 3 tokens back is where an induction head looks in a repeat of 4.
    captured[0] = capture_from_patterns(sets.get(REPEATED), _looking_back(sets.get(REPEATED).ids, lambda q: 3), logits)
    captured[1] = capture_from_patterns(sets.get(REACH), _looking_back(sets.get(REACH).ids, lambda q: 3))
    reach = tally(captured, sets).reach()["L0H0"]
    assert reach[4] == pytest.approx(1.0) and max(reach[8], reach[16], reach[32]) < 0.05  # chance repeats only


@pytest.mark.parametrize(
    "distance,words",
    [
        (31, "at the token after the earlier copy"),
        (32, "at the earlier copy of the same token"),
        (30, "into the earlier copy, 1 token after the one an induction head looks at (1.00 of its attention)"),
        (20, "a fixed 20 tokens back"),
        (1, "a fixed 1 token back"),
    ],
)
def test_where_a_head_looks_from_the_second_copy_is_said_against_where_an_induction_head_would(distance, words):
    ids = [list(range(32)) * 2 for _ in range(3)]
    pattern = torch.stack([p[0][0] for p in _looking_back(ids, lambda q: distance)])
    assert words in where_it_looks(pattern)


def _removed(name: str, gain_left: float, looks: str) -> AblationResult:
    reading = SimpleNamespace(results=SimpleNamespace(numbers={"in_context_gain": gain_left}))
    return AblationResult([name], name, "copying", None, reading, looks)


def test_a_model_that_copies_without_an_induction_head_is_told_which_heads_carry_the_gain_and_where_they_look():
    reading = SimpleNamespace(results=SimpleNamespace(numbers={"in_context_gain": 2.0}))
    found = [
        _removed("L0H0", 1.9, "a fixed 1 token back"),
        _removed("L1H0", 0.1, "a fixed 30 tokens back"),
        _removed("L1H1", 1.0, "at the first token"),
    ]
    lines = route_lines(reading, found)
    assert "no induction head, yet the second copy is predicted 2.00 nats better" in lines[0]
    assert lines[1:3] == [
        "  L1H0: removing it takes 95% of the gain; it looks a fixed 30 tokens back",
        "  L1H1: removing it takes 50% of the gain; it looks at the first token",
    ]
    assert "--seed" in lines[-1] and len(lines) == 4  # L0H0, which carries 5%, is not among them
    assert route_lines(reading, []) == []
