"""Head types: each score on hand-made patterns with known answers, on a real model against the
formulas written out directly, the repeated-token batch, the type rule, ablation, the watch's
forwards, and `sample.py --heads`."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import tiny_model

from data.tokenizer import CharTokenizer
from watch.inspect import heads_json
from watch.measure.capture import capture_attention, capture_from_patterns
from watch.measure.heads import Ablation, ablation_for, with_spread
from watch.measure.headtypes import TYPE_MIN, TYPE_SETS, TYPES, best_offset, heads_of
from watch.measure.patching import PAIRS, PATHS
from watch.measure.probesets import (
    PRONOUN,
    QUICK_TOKENS,
    REACH,
    REPEATED,
    SENTENCES,
    TEXT,
    ProbeSet,
    ProbeSets,
    held_out_text,
    repeated_length,
    repeated_tokens,
    repeats_by_distance,
    token_pool,
)
from watch.measure.proofs import AblationResult, head_means, proofs
from watch.measure.reading import (
    AT_EVALUATIONS,
    CUT,
    HALF,
    PROBE_KINDS,
    WHOLE,
    Results,
    interpret,
    measure,
    measures,
    quick_sets,
    read_pass,
    tally,
)
from watch.measure.scores import icl_positions
from watch.show.report import ablation_lines, type_legend, type_lines, type_table
from watch.show.tensorboard import CHARTS

L = 6  # hand-made repeated sequences: 6 distinct tokens, then the same 6 again
T = 12


def rows(rule) -> torch.Tensor:
    """A [T, T] pattern: each query row puts all its weight on the key `rule(i)` returns."""
    pattern = torch.zeros(T, T)
    for i in range(T):
        pattern[i, rule(i)] = 1.0
    return pattern


def uniform() -> torch.Tensor:
    return torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]


# One head per kind of behaviour, in this order.
PATTERNS = {
    "previous": rows(lambda i: max(i - 1, 0)),
    "induction": rows(lambda i: i - L + 1 if i >= L else i),
    "duplicate": rows(lambda i: i - L if i >= L else i),
    "sink": rows(lambda i: 0),
    "current": rows(lambda i: i),
    "offset3": rows(lambda i: i - 3 if i >= 3 else 0),
    "uniform": uniform(),
}


def hand_results():
    """Results read from captures of these patterns: two repeated sequences (no token twice within a
    copy) and two text windows, every head as its name says, in one layer."""
    repeated = ProbeSet(REPEATED, [[3, 1, 4, 5, 9, 2] * 2, [7, 0, 8, 6, 2, 1] * 2], all_logits=True)
    text = ProbeSet(TEXT, [list(range(T)), list(range(5, 5 + T))], all_logits=True)
    layer = torch.stack(list(PATTERNS.values()))  # [head, T, T]
    logits = [torch.zeros(T, 20), torch.zeros(T, 20)]
    captured = [capture_from_patterns(s, [[layer], [layer]], logits) for s in (repeated, text)]
    return tally(captured, ProbeSets({REPEATED: repeated, TEXT: text}))


def by_head(results, score_name: str) -> dict[str, float]:
    return {name: round(results.head(score_name, 0, head), 6) for head, name in enumerate(PATTERNS)}


def test_a_pure_pattern_scores_one_as_its_own_type():
    results = hand_results()
    assert by_head(results, "previous_token")["previous"] == 1.0
    assert by_head(results, "induction")["induction"] == 1.0
    assert by_head(results, "duplicate_token")["duplicate"] == 1.0
    assert by_head(results, "sink")["sink"] == 1.0
    assert by_head(results, "current_token")["current"] == 1.0
    assert by_head(results, "positional_3")["offset3"] == 1.0
    assert by_head(results, "broad")["uniform"] == 1.0


def test_and_what_it_scores_as_the_others():
    results = hand_results()
    previous = {
        kind: by_head(results, kind)["previous"]
        for kind in ("induction", "duplicate_token", "sink", "current_token", "broad", "positional_2")
    }
    # No token repeats within a copy, so the token before a query is never a target of induction.
    assert previous == {
        "induction": 0.0,
        "duplicate_token": 0.0,
        "sink": pytest.approx(1 / (T - 1)),
        "current_token": 0.0,
        "broad": 0.0,
        "positional_2": 0.0,
    }
    assert by_head(results, "previous_token")["induction"] == pytest.approx(0.0)
    assert by_head(results, "duplicate_token")["induction"] == 0.0  # one past the earlier occurrence
    assert by_head(results, "induction")["duplicate"] == 0.0
    assert by_head(results, "induction")["current"] == 0.0  # the current position is never a target
    assert by_head(results, "sink")["current"] == 0.0
    # A uniform row's share of a target is 1 / (positions it spreads over).
    spread = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert by_head(results, "previous_token")["uniform"] == pytest.approx(spread)
    offset = best_offset(results.heads)[1]
    assert int(offset[0, list(PATTERNS).index("offset3")]) == 3


def test_transformerlens_divides_the_same_weight_by_every_position():
    """detect_head's "mul" score is ours times (positions with a target / all positions): a perfect
    induction head scores 1.0 here and below 0.5 there."""
    results = hand_results()
    induction = PATTERNS["induction"]
    tokens = torch.tensor([3, 1, 4, 5, 9, 2] * 2)
    detection = torch.zeros(T, T)  # TransformerLens's induction detection pattern for these tokens
    for i in range(T):
        for j in range(1, i + 1):
            if tokens[j - 1] == tokens[i] and j - 1 < i:
                detection[i, j] = 1.0
    theirs = float((induction * detection).sum() / induction.sum())
    with_target = L  # the second copy: every query there has a target
    assert theirs == pytest.approx(results.head("induction", 0, 1) * with_target / T) and theirs == 0.5


# --- a real model, against the formulas written out -------------------------------------------------


def reference(model, repeated: ProbeSet, text: ProbeSet) -> dict:
    """The scores computed position by position from each sequence's own patterns and losses."""
    out = {"previous_token": [], "induction": [], "duplicate_token": [], "first": [], "second": []}
    for ids in repeated.ids:
        layers = capture_attention(model, [ids])[0]
        half = len(ids) // 2
        ind, dup = [], []
        for i in range(len(ids)):
            targets = [j for j in range(1, i) if ids[j - 1] == ids[i]] if i >= half else []
            if targets:
                ind.append(torch.stack([p[:, i, targets].sum(-1) for p in layers]))
            same = [j for j in range(i) if ids[j] == ids[i]]
            if same:
                dup.append(torch.stack([p[:, i, same].sum(-1) for p in layers]))
        out["induction"] += ind
        out["duplicate_token"] += dup
        with torch.no_grad():
            logits, _ = model(torch.tensor([ids]), all_logits=True)
        losses = torch.nn.functional.cross_entropy(logits[0, :-1].double(), torch.tensor(ids[1:]), reduction="none")
        out["first"] += losses[: half - 1].tolist()
        out["second"] += losses[half : 2 * half - 1].tolist()
    differences = []
    for ids, partner in zip(text.ids[0::2], text.ids[1::2], strict=True):
        for sequence in (ids, partner):
            layers = capture_attention(model, [sequence])[0]
            out["previous_token"] += [torch.stack([p[:, i, i - 1] for p in layers]) for i in range(1, len(ids))]
        # The late band's tokens, with the whole context and again early in the partner window.
        early, late = icl_positions(len(ids))
        offset = late.start - early.start
        assert partner[: len(ids) - offset] == ids[offset:]
        late_losses, early_losses = [], []
        for sequence, losses_of in ((ids, late_losses), (partner, early_losses)):
            with torch.no_grad():
                logits, _ = model(torch.tensor([sequence]), all_logits=True)
            losses_of += torch.nn.functional.cross_entropy(
                logits[0, :-1].double(), torch.tensor(sequence[1:]), reduction="none"
            ).tolist()
        band = range(late.start, late.stop)
        differences.append(
            sum(late_losses[p - 1] for p in band) / len(band)
            - sum(early_losses[p - offset - 1] for p in band) / len(band)
        )
    means = {k: torch.stack(v).double().mean(0) for k, v in out.items() if k not in ("first", "second")}
    means["in_context_gain"] = sum(out["first"]) / len(out["first"]) - sum(out["second"]) / len(out["second"])
    means["in_context_score"] = sum(differences) / len(differences)
    return means


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_a_real_models_scores_are_the_formulas(arch):
    model = tiny_model(arch, vocab_size=40, block_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    repeated = repeated_tokens(range(40), 32, sequences=6)
    text = held_out_text(torch.randint(0, 40, (200,), generator=torch.Generator().manual_seed(3)).numpy(), 32, pairs=2)
    results = measure(model, ProbeSets({REPEATED: repeated, TEXT: text}))
    expected = reference(model, repeated, text)
    for name in ("previous_token", "induction", "duplicate_token"):
        torch.testing.assert_close(results.heads[name], expected[name], atol=1e-5, rtol=1e-4)
    for name in ("in_context_gain", "in_context_score"):
        assert results.numbers[name] == pytest.approx(expected[name], abs=1e-4)
    assert results.forwards == 2


# --- the repeated-token batch ------------------------------------------------------------------------


def test_the_repeated_batch_is_the_same_for_the_same_seed_and_follows_its_definition():
    pool = list(range(5, 65))
    a, b = repeated_tokens(pool, 128), repeated_tokens(pool, 128)
    assert a.ids == b.ids and a.ids != repeated_tokens(pool, 128, seed=1).ids
    assert len(a) == 128 and repeated_length(128) == 50 and repeated_length(64) == 32
    for ids in a.ids:
        assert len(ids) == 100 and ids[:50] == ids[50:] and set(ids) <= set(pool)
    assert "not measurable" in repeated_tokens(pool, 30)  # block_size < 32: no set, a reason


def test_a_quick_pass_reads_the_first_whole_groups_of_each_generated_set_and_the_probe_files_whole():
    pool = list(range(5, 65))
    text = held_out_text(torch.randint(5, 65, (40_000,), generator=torch.Generator().manual_seed(0)).numpy(), 64)
    probes = ProbeSet(PRONOUN, [[1, 2, 3]] * 300, logits_at=[2] * 300)
    sets = ProbeSets(
        {
            REPEATED: repeated_tokens(pool, 64),
            REACH: ProbeSet(REACH, [[1, 2]]),
            TEXT: text,
            PRONOUN: probes,
            SENTENCES: ProbeSet(SENTENCES, [[1, 2]]),
        }
    )
    quick = quick_sets(sets).sets
    assert set(quick) == {REPEATED, TEXT, PRONOUN}  # the sentences and the reach are read at evaluations only
    for kind in (REPEATED, TEXT):
        cut, whole = quick[kind], sets.get(kind)
        assert sum(map(len, cut.ids)) <= QUICK_TOKENS and len(cut) % whole.group == 0 and 0 < len(cut) < len(whole)
        assert cut.ids == whole.ids[: len(cut)] and cut.all_logits == whole.all_logits
    assert quick[PRONOUN] is probes


def test_the_pool_is_the_training_splits_tokens_without_end_of_text():
    tokenizer = CharTokenizer.from_text("abcd")
    assert token_pool(torch.tensor([2, 0, 2]).numpy(), tokenizer).tokens == [0, 2]
    assert token_pool(None, tokenizer).tokens == [0, 1, 2, 3]  # no split here: the vocabulary


def test_icl_positions_are_bands_at_olssons_fractions_of_the_context():
    assert icl_positions(512) == (range(26, 77), range(461, 512))  # around token 50; the last tenth
    assert icl_positions(64) == (range(3, 10), range(58, 64)) and icl_positions(32) == (range(2, 5), range(29, 32))


# --- the type rule -----------------------------------------------------------------------------------


def test_a_type_needs_its_score_and_three_times_the_untrained_one():
    results, untrained = hand_results(), hand_results()
    # Untrained: every head as uniform as can be.
    for name in untrained.heads:
        untrained.heads[name] = torch.full_like(untrained.heads[name], 0.05)

    def types():
        return interpret(results, interpret(untrained)).types

    assert {name: t.kind for name, t in types().items()} == {
        "L0H0": "previous_token",
        "L0H1": "induction",
        "L0H2": "duplicate_token",
        "L0H3": "sink",
        "L0H4": "current_token",
        "L0H5": "positional",
        "L0H6": None,
    }
    untrained.heads["induction"][0, 1] = 0.5  # as high before training: not learned as induction;
    assert types()["L0H1"].kind == "positional"  # on text it looks L - 1 back every time
    results.heads["sink"][0, 3] = TYPE_MIN - 0.01  # below the bar
    assert types()["L0H3"].kind is None


def test_a_pronoun_head_is_a_type_by_the_same_rule():
    results, untrained = hand_results(), hand_results()
    for name in untrained.heads:
        untrained.heads[name] = torch.full_like(untrained.heads[name], 0.05)
    # Mean weight from the pronoun on its referent: the uniform head (typed nothing else) at 0.9, the
    # current-token head at 0.5, against 0.1 and 0.2 untrained: 3x 0.2 is 0.6, more than the 0.5 it has.
    results.heads["referent"] = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.9]], dtype=torch.float64)
    untrained.heads["referent"] = torch.tensor([[0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1]], dtype=torch.float64)
    reading = interpret(results, interpret(untrained))
    assert reading.types["L0H6"].kind == "pronoun" and reading.types["L0H4"].kind == "current_token"
    table = type_table(reading)
    assert table.splitlines()[0].split()[-3:] == ["pronoun", "spread", "out"] and "0.90 (0.10)" in table
    lines = type_lines(reading, {"pronoun": "since step 250 (256,000 tokens)"})
    assert "pronoun heads: L0H6 0.90 (untrained 0.10), since step 250 (256,000 tokens)" in lines
    assert "pronoun: looks from a pronoun at the noun it refers to" in type_legend(reading)


def test_every_head_type_record_reaches_the_table_the_legend_the_charts_and_the_json():
    """A head type is one record (`TYPES`): its column and legend line, its TensorBoard charts, its key in
    `sample.py --heads --json` and the number removing its heads is tested on all come from it."""
    results, untrained = hand_results(), hand_results()
    for r in (results, untrained):  # the pronoun type's score, as the pronoun probes give it
        r.heads["referent"] = torch.full((1, len(PATTERNS)), 0.1, dtype=torch.float64)
    reading = interpret(results, interpret(untrained, is_untrained=True))
    header, legend = type_table(reading).splitlines()[0], type_legend(reading)
    found = heads_json(reading, [], "zero", results.sets)["heads"]["L0H0"]
    given = {name for kind in PROBE_KINDS.values() for name in (*kind.numbers, *kind.scores)}
    for name, head_type in TYPES.items():
        assert head_type.column in header and f"{head_type.column}: {head_type.meaning}" in legend
        assert f"{name.replace('_', '-')}, every head" in CHARTS["head types"]
        assert f"{name.replace('_', '-')}: best head now and before fine-tuning" in CHARTS["fine-tuning"]
        assert found[name] is not None and found["untrained"][name] is not None
        assert head_type.probe_set in PROBE_KINDS and head_type.tested_on in given  # numbers a pass gives
    assert [kind for kind in found if kind in TYPES] == [
        *(k for k, t in TYPES.items() if t.read is None),
        "positional",
        "pronoun",
    ]


def test_a_pass_reads_the_scores_of_each_kind_of_probe_set_and_of_the_types_measured_on_it():
    text = measures(TEXT)
    assert {"broad", "text_loss", "in_context_score", "previous_token", "sink", "current_token"} <= set(text)
    assert {f"positional_{k}" for k in range(2, 9)} <= set(text)  # the positional type's offsets
    assert {"induction", "duplicate_token", "loss_first_copy"} <= set(measures(REPEATED)) and "induction" not in text
    assert {"referent", "continuation_accuracy"} <= set(measures(PRONOUN)) and measures(SENTENCES) == {}
    assert {kind.quick for kind in PROBE_KINDS.values()} == {WHOLE, CUT, HALF, AT_EVALUATIONS}


def test_a_head_close_to_a_type_says_so_with_its_figure_and_the_untrained_one():
    results, untrained = hand_results(), hand_results()
    for name in untrained.heads:
        untrained.heads[name] = torch.full_like(untrained.heads[name], 0.004 if name.endswith("_spread") else 0.06)
    results.heads["sink"][0, 3] = 0.3  # the sink head, below the 0.4 a type needs
    results.heads["duplicate_token"][0, 2] = 0.05  # the duplicate-token head, far below it
    lines = type_lines(interpret(results, interpret(untrained)))
    assert "no first-token (sink) head yet, but L0H3 is close: 0.30, where a type needs 0.40 (untrained 0.06)" in lines
    # Far from it: no "yet"; a score read from random sequences has its spread, the untrained model's too.
    assert "no duplicate-token head (best L0H3 0.167 ± 0.000, untrained 0.060 ± 0.004)" in lines
    legend = type_legend(interpret(results, interpret(untrained)))
    assert "at least 0.4 and at least 3x the same head's in the untrained model" in legend
    assert "pronoun" not in legend  # no probes here: no pronoun column either


@pytest.mark.parametrize(
    "old, new, words",
    [
        (
            3.01,
            -0.82,
            "shrinks the in-context gain by 3.830 nats/token, from 3.010 ± 0.050 to -0.820 ± 0.040: all of it and more",
        ),
        (1.0, 0.02, "shrinks the in-context gain by 0.980 nats/token, from 1.000 ± 0.050 to 0.020 ± 0.040: all of it"),
        (
            0.344,
            0.131,
            "shrinks the in-context gain by 0.213 nats/token, from 0.344 ± 0.050 to 0.131 ± 0.040: 62 ± 13% of it",
        ),
        (
            3.0,
            2.9,
            "shrinks the in-context gain by 0.100 nats/token, from 3.000 ± 0.050 to 2.900 ± 0.040: almost none of it",
        ),
        (
            0.5,
            0.6,
            "grows the in-context gain by 0.100 nats/token, from 0.500 ± 0.050 to 0.600 ± 0.040: none of it; it "
            "grows by 20 ± 14%",
        ),
        # A change within the spread of the difference (0.05 and 0.04 added in quadrature: 0.064) is none.
        (
            0.5,
            0.49,
            "changes the in-context gain by nothing measurable (0.500 ± 0.050 -> 0.490 ± 0.040, within their spreads)",
        ),
    ],
)
def test_what_removing_heads_cost_is_said_in_plain_words(old, new, words):
    def reading(numbers):
        return interpret(Results({}, numbers, {}, [], ProbeSets(), 0))

    before = reading(
        {"in_context_gain": old, "in_context_gain_spread": 0.05, "loss_first_copy": 4.0, "loss_second_copy": 4.0 - old}
    )
    after = reading(
        {"in_context_gain": new, "in_context_gain_spread": 0.04, "loss_first_copy": 4.1, "loss_second_copy": 4.1 - new}
    )
    found = AblationResult(["L1H3", "L0H0"], "top two by score", "induction", Ablation([(1, 3), (0, 0)]), after)
    line = ablation_lines(before, [found])
    # The amount always positive: the verb says which way.
    assert line.startswith(
        f"removing L1H3 and L0H0 (the two highest induction scores) {words} (first copy 4.00 -> 4.10"
    )
    assert "-%" not in line and "removed" not in line  # no "-62% of it removed"


def test_redrawing_the_held_out_windows_moves_each_figure_less_than_its_spread():
    """Five draws of the windows on one model: the in-context score never claims opposite signs, any two
    draws differ by less than their spreads together, and the heads' text scores barely move."""
    model = tiny_model(vocab_size=40, block_size=64)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    tokens = torch.randint(0, 40, (30_000,), generator=torch.Generator().manual_seed(1)).numpy()
    draws = [measure(model, ProbeSets({TEXT: held_out_text(tokens, 64, seed=seed)})) for seed in range(5)]
    scores = [(r.numbers["in_context_score"], r.numbers["in_context_score_spread"]) for r in draws]
    assert len({round(value, 6) for value, _ in scores}) == 5  # the draws differ
    assert not (any(v > s for v, s in scores) and any(v < -s for v, s in scores)), scores
    for a, spread_a in scores:
        for b, spread_b in scores:
            assert abs(a - b) <= spread_a + spread_b, scores
    for name in ("previous_token", "sink", "current_token", "broad"):
        values = torch.stack([r.heads[name] for r in draws])
        assert float(values.max(0).values.sub(values.min(0).values).max()) < 0.02, name


def test_a_sequence_drawn_twice_counts_once():
    """`probesets.distinct`: every set of random draws holds each draw once, so a spread counts what is independent:
    a periodic text's windows are its period's few pairs, whatever the places drawn; a vocabulary of two tokens has 16
    first repeats of 4 tokens, and the repeats by distance keep one row of each; 40 tokens never repeat a sequence."""
    import numpy as np

    text = held_out_text(np.array([1, 2, 3] * 500), 32)
    pairs = {tuple(first + partner) for first, partner in zip(text.ids[0::2], text.ids[1::2], strict=True)}
    assert len(text) == 6 and len(pairs) == 3
    assert text.about.startswith("6 windows of 32 tokens")
    reach = repeats_by_distance([7, 8], 64)
    firsts = [tuple(row[:8]) for row in reach.ids]
    assert len(firsts) == len(set(firsts)) == len(reach.items) <= 16
    assert reach.about.startswith(f"{len(reach)} rows")
    assert len(repeated_tokens(range(40), 32)) == 128  # nothing drawn twice, nothing left out


@pytest.mark.parametrize(
    ("value", "spread", "sign", "shown"),
    [
        (0.95213, 0.0043, False, "0.952 ± 0.004"),
        (0.41, None, False, "0.410"),
        (-9.85e-5, 2.65e-5, True, "-0.00010 ± 0.00003"),
        (0.0123, 0.0004, True, "+0.0123 ± 0.0004"),
        (1.5, 0.0005, False, "1.500 ± 0.001"),
    ],
)
def test_a_spread_is_shown_to_its_first_digit_never_as_zero(value, spread, sign, shown):
    """`heads.with_spread`, the one way a figure is written beside its spread: a spread too small for three decimals
    is shown to its first digit, the figure to the same places, so no report says "± 0.000" of draws that differ."""
    assert with_spread(value, spread, signed=sign) == shown


# --- ablation ----------------------------------------------------------------------------------------


def test_removing_a_head_changes_only_what_comes_after_it():
    model = tiny_model(vocab_size=40, block_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    sets = ProbeSets({REPEATED: repeated_tokens(range(40), 32, sequences=4)})
    plain = measure(model, sets)
    last = measure(model, sets, ablate=Ablation([(1, 0)]))  # the last layer: no head's pattern can change
    for name, values in plain.heads.items():
        torch.testing.assert_close(values, last.heads[name])
    assert last.numbers["in_context_gain"] != pytest.approx(plain.numbers["in_context_gain"], abs=1e-6)
    first = measure(model, sets, ablate=Ablation([(0, 1)]))  # layer 0's own patterns stay; layer 1 sees the change
    torch.testing.assert_close(first.heads["induction"][0], plain.heads["induction"][0])
    assert not torch.allclose(first.heads["induction"][1], plain.heads["induction"][1])
    assert first.ablated == ["L0H1"]


def test_mean_ablation_puts_each_heads_mean_output_in_its_place():
    model = tiny_model(vocab_size=40, block_size=16)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    text = held_out_text(torch.randint(0, 40, (100,), generator=torch.Generator().manual_seed(0)).numpy(), 16, pairs=2)
    means = head_means(model, text)
    # The same means from the layer's own maths: each head's output (weights times values), averaged.
    with torch.no_grad():
        x = model.wte(torch.tensor(text.ids)) + model.wpe.weight[:16]
        attn = model.blocks[0].attn
        queries, keys, values = attn._project(model.blocks[0].ln_1(x))
        _, weights = attn.forward_with_weights(model.blocks[0].ln_1(x))
        context = weights @ values  # [B, H, T, head_dim]
    torch.testing.assert_close(means[0], context.mean(dim=(0, 2)), atol=1e-5, rtol=1e-4)
    removed = ablation_for(["L0H1"], 2, 2, means)
    assert removed.heads == ((0, 1),) and removed.mode == "mean" and removed.means is means
    zero = ablation_for(["L0H1"], 2, 2)
    assert zero.heads == removed.heads and zero.mode == "zero"
    sets = ProbeSets({TEXT: text})
    zero_loss, mean_loss = (measure(model, sets, ablation).numbers["text_loss"] for ablation in (zero, removed))
    assert zero_loss != pytest.approx(mean_loss, abs=1e-6)
    with pytest.raises(ValueError, match="mean-ablation needs held-out text"):  # sets without the text
        proofs(model, ProbeSets(), read_pass(model, sets), "mean")


# --- the watch: one forward per probe set at each watch point ------------------------------------------


def test_a_watch_point_runs_one_forward_per_probe_set(trained, monkeypatch, tmp_path):
    from formats import load_model
    from model.gpt import GPT
    from watch.callback import AttentionWatch

    loaded = load_model(trained.char, torch.device("cpu"))
    text = "the cat saw the dog and it ran."
    probes = tmp_path / "p.jsonl"
    probes.write_text(json.dumps({"text": text, "pronoun": "it", "referent": "dog", "distractor": "cat"}) + "\n")

    class Writer:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

        def head(self, name):  # each head's own run
            return self

    class Trainer:
        model, tokenizer, data = loaded.model, loaded.tokenizer, None
        cfg = type("Cfg", (), {"seed": 1})

    watch = AttentionWatch(Writer(), [text], probes)
    watch.on_fit_start(Trainer)
    forwards = []
    original = GPT.forward_with_attention
    monkeypatch.setattr(
        GPT, "forward_with_attention", lambda self, *a, **k: forwards.append(1) or original(self, *a, **k)
    )
    watch.on_watch(Trainer, 5)
    assert sorted(watch.sets.sets) == ["pronoun", "reach", "repeated", "sentences"]  # no data here: no held-out text
    # The pronoun probes, the repeated tokens and the sentences (their heatmaps at every pass); the repeats at several
    # distances wait for evaluations.
    assert len(forwards) == 3


def test_a_run_from_scratch_takes_its_untrained_baseline_from_the_evaluation_at_step_0(trained, monkeypatch):
    """At step 0 a run from scratch is the untrained model of its seed: the watch reads it once, there."""
    from formats import load_model
    from model.gpt import GPT
    from watch.callback import AttentionWatch
    from watch.measure.reading import read_pass, untrained_like

    loaded = load_model(trained.char, torch.device("cpu"))
    fresh = untrained_like(loaded.model, 1)

    class Writer:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    class Trainer:
        model, tokenizer, data = fresh, loaded.tokenizer, None
        cfg = type("Cfg", (), {"seed": 1})
        state = type("State", (), {"step": 0, "eval_step": None})

    forwards = []
    original = GPT.forward_with_attention
    monkeypatch.setattr(
        GPT, "forward_with_attention", lambda self, *a, **k: forwards.append(1) or original(self, *a, **k)
    )
    watch = AttentionWatch(Writer())
    watch.on_fit_start(Trainer)
    assert forwards == [] and watch.pending == {"untrained"} and watch.untrained is None
    reading = watch.read(fresh, watch.sets, 0)
    assert watch.untrained is reading.untrained and not watch.pending
    expected = read_pass(fresh, watch.sets, untrained=read_pass(fresh, watch.sets, kinds=TYPE_SETS, compose=True))
    assert [t.kind for t in reading.types.values()] == [t.kind for t in expected.types.values()]
    assert all(torch.equal(reading.untrained.type_scores[k], v) for k, v in expected.untrained.type_scores.items())
    Trainer.model = loaded.model  # trained weights at step 0 (a fine-tune's start): the baseline is read at once
    watch = AttentionWatch(Writer())
    watch.on_fit_start(Trainer)
    assert not watch.pending and watch.untrained is not None


def test_the_first_and_last_evaluations_read_every_set_whole_and_those_between_what_a_quick_pass_reads(
    trained, monkeypatch
):
    """The first evaluation is the untrained baseline and the last the report: both read every set whole. Those
    between read the quick sets, and the sentences and the repeats by distance they show; the in-context score,
    too rough from a few held-out windows, is logged from the whole passes only."""
    from types import SimpleNamespace

    import numpy as np

    from formats import load_model
    from watch import callback
    from watch.callback import AttentionWatch
    from watch.measure.reading import untrained_like

    loaded = load_model(trained.char, torch.device("cpu"))
    text = np.array(loaded.tokenizer.encode("the cat saw the dog and it ran to the king. " * 60))
    logged = []

    class Writer:
        def __getattr__(self, name):
            return lambda tag, value=None, step=None, **kwargs: logged.append((name, tag, step))

        def head(self, name):
            return self

    trainer = SimpleNamespace(
        model=untrained_like(loaded.model, 1),
        tokenizer=loaded.tokenizer,
        data=SimpleNamespace(tokens=lambda split: text),
        cfg=SimpleNamespace(seed=1, max_iters=10),
        state=SimpleNamespace(step=0, eval_step=None),
    )
    passes = []
    original = callback.read_pass
    monkeypatch.setattr(
        callback, "read_pass", lambda model, sets, **kw: passes.append(sets) or original(model, sets, **kw)
    )
    watch = AttentionWatch(Writer(), ["the cat saw the dog and it ran."])
    watch.on_fit_start(trainer)
    for step in (0, 5, 10):
        watch.on_evaluate(trainer, SimpleNamespace(step=step))
    assert passes == [watch.sets, watch.between, watch.sets]
    assert set(watch.between.sets) == set(watch.sets.sets) == {REPEATED, REACH, TEXT, SENTENCES, PAIRS, PATHS}
    assert len(watch.between.get(TEXT)) < len(watch.sets.get(TEXT))
    assert all(watch.between.get(kind) is watch.sets.get(kind) for kind in (REACH, SENTENCES))

    def steps(written):
        return sorted({step for _, tag, step in logged if isinstance(tag, str) and written(tag)})

    assert steps(lambda tag: tag == "heads/in_context_score") == [0, 10]
    assert steps(lambda tag: tag.startswith("heads/induction/best_at_")) == [0, 5, 10]
    assert steps(lambda tag: tag.startswith("attention/the cat")) == [0, 5, 10]


# --- sample.py --heads --------------------------------------------------------------------------------


def test_sample_prints_the_head_types_and_their_json(trained, tmp_path):
    from tests.commands import run_sample

    text = tmp_path / "text.txt"
    text.write_text("the cat saw the king and he waved.\n" * 3)
    code, out, err = run_sample([f"--out_dir={trained.char}", "--heads", f"--text={text}"])
    assert (code, err) == (0, "")
    assert "untrained model's scores in brackets" in out and "in-context gain on repeated random tokens" in out
    # One line said three times: of the 47 places a pair of windows fits, 35 differ, and a pair drawn twice is one.
    assert "L0H1" in out and f"70 windows of 32 tokens at random places in {text}" in out
    code, out, _ = run_sample([f"--out_dir={trained.char}", "--heads", f"--text={text}", "--json"])
    report = json.loads(out)
    assert set(report["heads"]) == {"L0H0", "L0H1"}
    head = report["heads"]["L0H0"]
    assert {"previous_token", "duplicate_token", "induction", "sink", "type", "untrained"} <= set(head)
    assert all(0.0 <= head[k] <= 1.0 for k in ("previous_token", "induction", "sink"))
    assert math.isfinite(report["in_context_gain"]) and report["ablated"] == []
    code, out, _ = run_sample([f"--out_dir={trained.char}", "--heads", f"--text={text}", "--json", "--ablate=L0H0"])
    removed = json.loads(out)
    assert removed["ablated"] == ["L0H0"] and removed["in_context_gain"] != report["in_context_gain"]
    # One layer: removing a head changes no pattern, only what the model predicts.
    assert removed["heads"]["L0H1"]["induction"] == pytest.approx(head_l0h1 := report["heads"]["L0H1"]["induction"])
    assert head_l0h1 is not None
    code, out, _ = run_sample(
        [f"--out_dir={trained.char}", "--heads", f"--text={text}", "--ablate=L0H0", "--ablation=mean"]
    )
    assert code == 0 and "L0H0 removed (mean-ablation)" in out


def test_since_when_names_the_best_heads_own_first_step_not_an_earlier_heads(monkeypatch):
    """In the induction demo a layer-1 head looks one token back for a while and loses it; the report's
    "since step" is when the previous-token head it lists first became one."""
    from types import SimpleNamespace

    from watch import callback
    from watch.callback import AttentionWatch

    def reading(*typed):
        types = {name: SimpleNamespace(kind=kind, name=name, score=score) for name, kind, score in typed}
        return SimpleNamespace(types=types, typed={kind: heads_of(types, kind) for kind in TYPES})

    def read(watched, step):  # each watch point reads `watched`: its passes are not what is tested here
        monkeypatch.setattr(callback, "read_pass", lambda *args, **kwargs: watched)
        return watch.read(None, watch.sets, step)

    watch = AttentionWatch(writer=None)
    watch.tokens_per_step = 100
    read(reading(("L1H0", "previous_token", 0.44)), 200)
    read(reading(("L1H0", None, 0.2), ("L0H1", "previous_token", 0.48)), 500)
    end = read(
        reading(("L0H1", "previous_token", 0.79), ("L1H0", "previous_token", 0.41), ("L1H1", "induction", 0.8)), 1500
    )
    assert watch.since(end) == {
        "previous_token": "L0H1 since step 500 (50,000 tokens)",
        "induction": "L1H1 since step 1,500 (150,000 tokens)",
    }
