"""What random-token probes draw, and how far another draw may move what they say: the rule that leaves out the
tokens separating examples (and says so where it cannot know), and the spread beside every head score read from
repeated tokens, which is the sequences' own scores' two standard errors."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from conftest import require_gpt2, tiny_model

from data.induction import training_text
from data.pronouns import training_text as pronoun_text
from data.tokenizer import CharTokenizer, GPT2Tokenizer, tokenizer_from_meta
from model import GPT, GPTConfig
from watch.measure.heads import parse_head
from watch.measure.probesets import (
    REACH,
    REPEATED,
    ProbeSets,
    draw_seed,
    repeated_tokens,
    repeats_by_distance,
    token_pool,
)
from watch.measure.reading import measure
from watch.measure.scores import induction_targets

# --- the rule -------------------------------------------------------------------------------------------


def test_the_induction_corpus_newline_is_not_drawn_and_the_rule_says_why():
    text = training_text(0, 200)
    tokenizer = CharTokenizer.from_text(text)
    pool = token_pool(torch.tensor(tokenizer.encode(text)).numpy(), tokenizer, "induction")
    newline = tokenizer.encode("\n")[0]
    assert newline not in pool.tokens and len(pool.tokens) == tokenizer.vocab_size - 1
    assert pool.rule == "the newline (the induction corpus has one example a line) not drawn: it separates examples"
    drawn = repeated_tokens(pool, 64)
    assert newline not in {t for ids in drawn.ids for t in ids} and drawn.draw_rule == pool.rule


def test_gpt2_end_of_text_is_never_drawn_nor_the_newline_of_the_pronoun_corpus():
    require_gpt2()
    text = pronoun_text(0, 50) + "<|endoftext|>"
    tokenizer = GPT2Tokenizer.from_text(text)
    tokens = torch.tensor(tokenizer.encode(text)).numpy()
    newlines = {i for i, s in enumerate(tokenizer.token_strings(range(len(tokenizer.kept_ids)))) if "\n" in s}
    assert tokenizer.eot_id in tokens and newlines

    demo = token_pool(tokens, tokenizer, "pronouns")
    assert tokenizer.eot_id not in demo.tokens and not newlines & set(demo.tokens)
    assert demo.rule.startswith("end-of-text and the newline (the pronouns corpus has one example a line) not drawn")

    own = token_pool(tokens, tokenizer, "my_notes.txt")  # a text of the user's own: end-of-text only
    assert tokenizer.eot_id not in own.tokens and newlines <= set(own.tokens)
    assert own.rule.startswith("end-of-text not drawn: it separates examples; the newline drawn like any token")


def test_in_a_char_text_of_ones_own_the_newline_is_drawn_and_the_rule_says_the_tool_cannot_tell():
    text = "To be, or not to be:\nthat is the question.\n"
    tokenizer = CharTokenizer.from_text(text)
    pool = token_pool(torch.tensor(tokenizer.encode(text)).numpy(), tokenizer, "hamlet.txt")
    assert tokenizer.encode("\n")[0] in pool.tokens
    assert pool.rule == (
        "every token drawn, the newline too: the tool cannot tell whether it separates examples in the text this "
        "model learned from"
    )
    assert token_pool(None, CharTokenizer.from_text("abc")).rule == "every token drawn"


# --- the spread -------------------------------------------------------------------------------------------


def test_a_head_scores_spread_is_two_standard_errors_of_its_sequences_own_scores():
    model = tiny_model(vocab_size=40, block_size=64)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    repeated = repeated_tokens(range(40), 64, sequences=12)
    results = measure(model, ProbeSets({REPEATED: repeated}))
    _, patterns = model.forward_with_attention(torch.tensor(repeated.ids))
    targets = induction_targets(torch.tensor(repeated.ids)).double()
    for layer, pattern in enumerate(patterns):
        # each sequence's own induction score: its weight on the targets, over its second copy's 32 queries
        own = (pattern.double() * targets[:, None]).sum((-1, -2)) / 32  # [sequence, head]
        expected = 2 * own.std(0) / math.sqrt(len(own))
        torch.testing.assert_close(results.heads["induction_spread"][layer], expected)
        torch.testing.assert_close(results.heads["induction"][layer], own.mean(0))
    assert results.heads["duplicate_token_spread"].shape == (2, 2)


def test_the_reach_by_distance_has_a_spread_for_each_distance():
    model = tiny_model(vocab_size=40, block_size=64)
    sets = ProbeSets({REACH: repeats_by_distance(range(40), 64, sequences=8)})
    results = measure(model, sets)
    for d in (4, 8, 16):
        spread = results.heads[f"induction_{d}_spread"]
        assert spread.shape == (2, 2) and bool((spread > 0).all()) and bool(spread.isfinite().all())


def test_one_sequence_has_no_spread_to_give():
    results = measure(
        tiny_model(vocab_size=40, block_size=64), ProbeSets({REPEATED: repeated_tokens(range(40), 64, sequences=1)})
    )
    assert bool(results.heads["induction_spread"].isinf().all())


def test_each_draw_has_its_own_seeds_and_says_which_it_is():
    assert [(draw_seed(n, REPEATED), draw_seed(n, REACH)) for n in range(3)] == [(0, 1), (2, 3), (4, 5)]
    assert "seed 2" in repeated_tokens(range(40), 64, seed=draw_seed(1, REPEATED)).about


# --- another draw, on a trained induction demo -------------------------------------------------------------


INDUCTION_DEMO = Path(__file__).parent / "data" / "induction_demo.pt"  # its recipe is inside


def induction_demo() -> tuple[GPT, CharTokenizer]:
    """The induction demo trained by its recipe (configs/induction.toml, seed 1, 1 thread, 1,500 steps): its weights,
    config and vocabulary, kept beside the tests so that reading it takes a second rather than a training run."""
    saved = torch.load(INDUCTION_DEMO, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**saved["model_config"]))
    model.load_state_dict(saved["model"])
    return model.eval(), tokenizer_from_meta(saved["tokenizer"])


def draw(pool, block_size: int, number: int) -> ProbeSets:
    """The repeated tokens and the repeats by distance of draw `number`, as the watch makes them."""
    sets = ProbeSets()
    sets.add(REPEATED, repeated_tokens(pool, block_size, seed=draw_seed(number, REPEATED)))
    sets.add(REACH, repeats_by_distance(pool, block_size, seed=draw_seed(number, REACH)))
    return sets


def test_another_draw_lands_within_the_first_draws_spread():
    """Draw 1 of the random sequences (the one the demo's floors are judged on) against draw 0 (the one the watch
    shows), on the trained induction demo: the best induction head's score and the in-context gain move by less than
    draw 0's spread, and the score at every distance by less than the two draws' spreads together."""
    model, tokenizer = induction_demo()
    pool = token_pool(None, tokenizer, "induction")  # the vocabulary, less the newline
    assert len(pool.tokens) == tokenizer.vocab_size - 1
    first, second = (measure(model, draw(pool, model.config.block_size, number)) for number in (0, 1))
    head, value = first.best("induction")
    assert value > 0.9  # an induction head, scored on sequences without a line break in them
    spread = first.head("induction_spread", *parse_head(head))
    assert 0 < spread < 0.02 and abs(second.per_head("induction")[head] - value) <= spread
    gain, gain_spread = first.numbers["in_context_gain"], first.numbers["in_context_gain_spread"]
    assert gain > 3 and abs(second.numbers["in_context_gain"] - gain) <= gain_spread
    for d, at in first.reach()[head].items():
        both = first.reach("_spread")[head][d] + second.reach("_spread")[head][d]
        assert abs(second.reach()[head][d] - at) <= both, d
