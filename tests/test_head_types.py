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
from model.ablation import Ablation
from watch.ablation import head_means, proofs
from watch.capture import capture_attention, capture_from_patterns
from watch.heads import ablation_for
from watch.headtypes import TYPE_MIN, positional
from watch.pipeline import read, score
from watch.probesets import (
    REPEATED,
    TEXT,
    ProbeSet,
    ProbeSets,
    held_out_text,
    repeated_length,
    repeated_tokens,
    token_pool,
)
from watch.reading import read_pass, read_results
from watch.scores import icl_positions

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
    layer = torch.stack(list(PATTERNS.values()))                      # [head, T, T]
    logits = [torch.zeros(T, 20), torch.zeros(T, 20)]
    captured = [capture_from_patterns(s, [[layer], [layer]], logits) for s in (repeated, text)]
    return read(captured, ProbeSets({REPEATED: repeated, TEXT: text}))


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
    previous = {kind: by_head(results, kind)["previous"] for kind in
                ("induction", "duplicate_token", "sink", "current_token", "broad", "positional_2")}
    # No token repeats within a copy, so the token before a query is never a target of induction.
    assert previous == {"induction": 0.0, "duplicate_token": 0.0, "sink": pytest.approx(1 / (T - 1)),
                        "current_token": 0.0, "broad": 0.0, "positional_2": 0.0}
    assert by_head(results, "previous_token")["induction"] == pytest.approx(0.0)
    assert by_head(results, "duplicate_token")["induction"] == 0.0   # one past the earlier occurrence
    assert by_head(results, "induction")["duplicate"] == 0.0
    assert by_head(results, "induction")["current"] == 0.0           # the current position is never a target
    assert by_head(results, "sink")["current"] == 0.0
    # A uniform row's share of a target is 1 / (positions it spreads over).
    spread = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert by_head(results, "previous_token")["uniform"] == pytest.approx(spread)
    best, offset = positional(results)
    assert int(offset[0, list(PATTERNS).index("offset3")]) == 3


def test_transformerlens_divides_the_same_weight_by_every_position():
    """detect_head's "mul" score is ours times (positions with a target / all positions): a perfect
    induction head scores 1.0 here and below 0.5 there."""
    results = hand_results()
    induction = PATTERNS["induction"]
    tokens = torch.tensor([3, 1, 4, 5, 9, 2] * 2)
    detection = torch.zeros(T, T)   # TransformerLens's induction detection pattern for these tokens
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
        out["first"] += losses[:half - 1].tolist()
        out["second"] += losses[half:2 * half - 1].tolist()
    for ids in text.ids:
        layers = capture_attention(model, [ids])[0]
        out["previous_token"] += [torch.stack([p[:, i, i - 1] for p in layers]) for i in range(1, len(ids))]
    means = {k: torch.stack(v).double().mean(0) for k, v in out.items() if k not in ("first", "second")}
    means["in_context_gain"] = sum(out["first"]) / len(out["first"]) - sum(out["second"]) / len(out["second"])
    return means


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_a_real_models_scores_are_the_formulas(arch):
    model = tiny_model(arch, vocab_size=40, block_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    repeated = repeated_tokens(range(40), 32, sequences=6)
    text = held_out_text(torch.randint(0, 40, (200,), generator=torch.Generator().manual_seed(3)).numpy(), 32,
                         windows=4)
    results = score(model, ProbeSets({REPEATED: repeated, TEXT: text}))
    expected = reference(model, repeated, text)
    for name in ("previous_token", "induction", "duplicate_token"):
        torch.testing.assert_close(results.heads[name], expected[name], atol=1e-5, rtol=1e-4)
    assert results.numbers["in_context_gain"] == pytest.approx(expected["in_context_gain"], abs=1e-4)
    assert results.forwards == 2


# --- the repeated-token batch ------------------------------------------------------------------------

def test_the_repeated_batch_is_the_same_for_the_same_seed_and_follows_its_definition():
    pool = list(range(5, 65))
    a, b = repeated_tokens(pool, 128), repeated_tokens(pool, 128)
    assert a.ids == b.ids and a.ids != repeated_tokens(pool, 128, seed=1).ids
    assert len(a) == 32 and repeated_length(128) == 50 and repeated_length(64) == 32
    for ids in a.ids:
        assert len(ids) == 100 and ids[:50] == ids[50:] and set(ids) <= set(pool)
    assert "not measurable" in repeated_tokens(pool, 30)  # block_size < 32: no set, a reason


def test_the_pool_is_the_training_splits_tokens_without_end_of_text():
    tokenizer = CharTokenizer.from_text("abcd")
    assert token_pool(torch.tensor([2, 0, 2]).numpy(), tokenizer) == [0, 2]
    assert token_pool(None, tokenizer) == [0, 1, 2, 3]  # no split here: the vocabulary


def test_icl_positions_are_bands_at_olssons_fractions_of_the_context():
    assert icl_positions(512) == (range(26, 77), range(461, 512))    # around token 50; the last tenth
    assert icl_positions(64) == (range(3, 10), range(58, 64)) and icl_positions(32) == (range(2, 5), range(29, 32))


# --- the type rule -----------------------------------------------------------------------------------

def test_a_type_needs_its_score_and_three_times_the_untrained_one():
    results, untrained = hand_results(), hand_results()
    # Untrained: every head as uniform as can be.
    for name in untrained.heads:
        untrained.heads[name] = torch.full_like(untrained.heads[name], 0.05)

    def types():
        return read_results(results, read_results(untrained)).types

    assert {name: t.kind for name, t in types().items()} == {
        "L0H0": "previous_token", "L0H1": "induction", "L0H2": "duplicate_token", "L0H3": "sink",
        "L0H4": "current_token", "L0H5": "positional", "L0H6": None}
    untrained.heads["induction"][0, 1] = 0.5          # as high before training: not learned as induction;
    assert types()["L0H1"].kind == "positional"       # on text it looks L - 1 back every time
    results.heads["sink"][0, 3] = TYPE_MIN - 0.01     # below the bar
    assert types()["L0H3"].kind is None


# --- ablation ----------------------------------------------------------------------------------------

def test_removing_a_head_changes_only_what_comes_after_it():
    model = tiny_model(vocab_size=40, block_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    sets = ProbeSets({REPEATED: repeated_tokens(range(40), 32, sequences=4)})
    plain = score(model, sets)
    last = score(model, sets, ablate=Ablation([(1, 0)]))   # the last layer: no head's pattern can change
    for name, values in plain.heads.items():
        torch.testing.assert_close(values, last.heads[name])
    assert last.numbers["in_context_gain"] != pytest.approx(plain.numbers["in_context_gain"], abs=1e-6)
    first = score(model, sets, ablate=Ablation([(0, 1)]))  # layer 0's own patterns stay; layer 1 sees the change
    torch.testing.assert_close(first.heads["induction"][0], plain.heads["induction"][0])
    assert not torch.allclose(first.heads["induction"][1], plain.heads["induction"][1])
    assert first.ablated == ["L0H1"]


def test_mean_ablation_puts_each_heads_mean_output_in_its_place():
    model = tiny_model(vocab_size=40, block_size=16)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    text = held_out_text(torch.randint(0, 40, (100,), generator=torch.Generator().manual_seed(0)).numpy(), 16,
                         windows=3)
    means = head_means(model, text)
    # The same means from the layer's own maths: each head's output (weights times values), averaged.
    with torch.no_grad():
        x = model.wte(torch.tensor(text.ids)) + model.wpe.weight[:16]
        attn = model.blocks[0].attn
        queries, keys, values = attn._project(model.blocks[0].ln_1(x))
        _, weights = attn.forward_with_weights(model.blocks[0].ln_1(x))
        context = weights @ values                                          # [B, H, T, head_dim]
    torch.testing.assert_close(means[0], context.mean(dim=(0, 2)), atol=1e-5, rtol=1e-4)
    removed = ablation_for(["L0H1"], 2, 2, means)
    assert removed.heads == ((0, 1),) and removed.mode == "mean" and removed.means is means
    zero = ablation_for(["L0H1"], 2, 2)
    assert zero.heads == removed.heads and zero.mode == "zero"
    sets = ProbeSets({TEXT: text})
    zero_loss, mean_loss = (score(model, sets, ablation).numbers["text_loss"] for ablation in (zero, removed))
    assert zero_loss != pytest.approx(mean_loss, abs=1e-6)
    with pytest.raises(ValueError, match="mean-ablation needs held-out text"):   # sets without the text
        proofs(model, ProbeSets(), read_pass(model, sets), "mean")


# --- the watch: one forward per probe set at each watch point ------------------------------------------

def test_a_watch_point_runs_one_forward_per_probe_set(trained, monkeypatch, tmp_path):
    from checkpoints import load_model
    from model.gpt import GPT
    from watch.callback import AttentionWatch

    loaded = load_model(trained.char, torch.device("cpu"))
    text = "the cat saw the dog and it ran."
    probes = tmp_path / "p.jsonl"
    probes.write_text(json.dumps({"text": text, "pronoun": "it", "referent": "dog", "distractor": "cat"}) + "\n")

    class Writer:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    class Trainer:
        model, tokenizer, data = loaded.model, loaded.tokenizer, None
        cfg = type("Cfg", (), {"seed": 1})

    watch = AttentionWatch(Writer(), [text], probes)
    watch.on_fit_start(Trainer)
    forwards = []
    original = GPT.forward_with_attention
    monkeypatch.setattr(GPT, "forward_with_attention", lambda self, *a, **k: forwards.append(1) or original(self, *a,
                                                                                                            **k))
    watch.on_watch(Trainer, 5)
    assert sorted(watch.sets.sets) == ["pronoun", "repeated", "sentences"]  # no data here: no held-out text
    assert len(forwards) == 2  # the pronoun probes and the repeated tokens; the sentences wait for evaluations


# --- sample.py --heads --------------------------------------------------------------------------------

def test_sample_prints_the_head_types_and_their_json(trained, tmp_path):
    from tests.cli import run_sample

    text = tmp_path / "text.txt"
    text.write_text("the cat saw the king and he waved.\n" * 3)
    code, out, err = run_sample([f"--out_dir={trained.char}", "--heads", f"--text={text}"])
    assert (code, err) == (0, "")
    assert "untrained model's scores in brackets" in out and "in-context gain on repeated random tokens" in out
    assert "L0H1" in out and f"16 windows of 32 tokens from {text}" in out
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
    code, out, _ = run_sample([f"--out_dir={trained.char}", "--heads", f"--text={text}", "--ablate=L0H0",
                               "--ablation=mean"])
    assert code == 0 and "L0H0 removed (mean-ablation)" in out
