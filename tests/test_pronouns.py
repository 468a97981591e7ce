"""The pronoun corpus: unambiguous, balanced, with referent-specific continuations
and noun pairs held out for probing."""

from collections import Counter

import pytest

from data import pronouns as P
from data.probes import Probe
from data.tokenizer import GPT2Tokenizer, gpt2_encoding

PRONOUNS = {"he", "she", "it"}


def parse(line: str) -> tuple[list[str], str, str]:
    """(the two candidate nouns in order, the pronoun, the word after it) of one line."""
    words = line.split()
    conj = words.index("and")
    nouns = [w for w in words[:conj] if w in P.CONTINUATIONS]
    return nouns, words[conj + 1], words[conj + 2]


def referent_of(nouns: list[str], pronoun: str) -> str:
    fits = [n for n in nouns if pronoun in P.PRONOUNS_OF[n]]
    assert len(fits) == 1, f"{pronoun!r} fits {fits} among {nouns}"
    return fits[0]


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return P.training_text(seed=5, n_sentences=3000).splitlines()


def test_same_seed_same_text_other_seed_other_text():
    assert P.training_text(3, 200) == P.training_text(3, 200)
    assert P.training_text(3, 200) != P.training_text(4, 200)
    assert P.probe_records(3) == P.probe_records(3)
    assert P.probe_records(3) != P.probe_records(4)


def test_one_sentence_a_line():
    text = P.training_text(seed=1, n_sentences=50)
    assert text.endswith(" .\n")
    assert len(text.splitlines()) == 50


def test_every_line_has_one_pronoun_that_fits_one_candidate(lines):
    for line in lines:
        nouns, pronoun, following = parse(line)
        assert len(nouns) == 2, line
        assert sum(w in PRONOUNS for w in line.split()) == 1, line
        referent = referent_of(nouns, pronoun)
        assert following in P.first_words(referent), line


def test_referent_first_exactly_half_the_time(lines):
    for text in (lines, P.training_text(seed=9, n_sentences=101).splitlines()):  # an odd count too
        first = sum(referent_of(nouns, pronoun) == nouns[0] for nouns, pronoun, _ in map(parse, text))
        assert first == len(text) // 2
    records = P.probe_records(seed=9)
    assert sum(Probe(**r).referent_offset < Probe(**r).distractor_offset for r in records) == len(records) // 2


def test_continuation_first_words_name_their_noun():
    owner: dict[str, str] = {}
    for noun in P.CONTINUATIONS:
        assert 2 <= len(P.CONTINUATIONS[noun]) <= 3
        for word in P.first_words(noun):
            assert owner.setdefault(word, noun) == noun, f"{word!r} follows both {owner[word]} and {noun}"
    # ...and no other word of the corpus could be mistaken for one.
    other = set(P.CONTINUATIONS) | PRONOUNS | {"the", "The", "and"}
    for phrase in P.VERBS_ANIMATE + P.VERBS_ANY + P.OPENERS + P.TAILS:
        other.update(phrase.split())
    other.update(P.OPINION_ADJECTIVES + P.SIZE_ADJECTIVES)
    assert not other & set(owner)
    for conts in P.CONTINUATIONS.values():
        for cont in conts:
            assert not set(cont.split()) & (set(P.CONTINUATIONS) | PRONOUNS | {"and"}), cont


def test_continuations_differ_in_their_first_gpt2_token():
    # Probes score the first token after the pronoun, so it must already tell nouns apart.
    enc = gpt2_encoding()
    owner: dict[int, str] = {}
    for noun in P.CONTINUATIONS:
        for word in P.first_words(noun):
            first = enc.encode(" " + word)[0]
            assert owner.setdefault(first, noun) == noun, f"{word!r}: first token shared with {owner[first]}"


def test_enough_nouns_of_each_kind():
    assert min(len(P.PEOPLE), len(P.ANIMALS), len(P.OBJECTS)) >= 16
    assert Counter(p for p, _ in P.PEOPLE.values()) == {"he": 9, "she": 9}


def test_held_out_pairs_never_meet_in_training(lines):
    valid = {frozenset(p) for pairs in P._valid_pairs().values() for p in pairs}
    assert P.HELD_OUT_PAIRS < valid
    assert 0.10 <= len(P.HELD_OUT_PAIRS) / len(valid) <= 0.15
    assert frozenset({"dog", "ball"}) not in P.HELD_OUT_PAIRS
    seen = {frozenset(parse(line)[0]) for line in lines}
    assert not seen & P.HELD_OUT_PAIRS
    assert {n for pair in seen for n in pair} == set(P.CONTINUATIONS)  # every noun is still trained
    for record in P.probe_records():
        assert frozenset({record["referent"], record["distractor"]}) in P.HELD_OUT_PAIRS


def test_probe_records_are_complete_sentences_with_referent_continuations():
    for record in P.probe_records(seed=2)[:50]:
        nouns, pronoun, following = parse(record["text"])
        assert pronoun == record["pronoun"] and referent_of(nouns, pronoun) == record["referent"]
        assert record["distractor"] in nouns and record["distractor"] != record["referent"]
        assert record["continuations"] == P.first_words(record["referent"])
        assert record["distractor_continuations"] == P.first_words(record["distractor"])
        assert following in record["continuations"]
        assert record["text"].endswith(" .") and not any(t in record["text"] for t in P.TAILS)


@pytest.fixture(scope="module")
def default_tokenizer() -> GPT2Tokenizer:
    return GPT2Tokenizer.from_text(P.training_text())


def test_explanation_sentence_belongs_to_the_corpus(default_tokenizer):
    default_tokenizer.encode(P.EXPLANATION_SENTENCE)  # raises if any of its tokens is missing
    nouns, pronoun, following = parse(P.EXPLANATION_SENTENCE)
    assert nouns == ["dog", "ball"] and referent_of(nouns, pronoun) == "dog"
    assert "fetched" in P.VERBS_ANIMATE and following == "was"


def test_default_corpus_covers_every_probe_and_continuation(default_tokenizer):
    for record in P.probe_records():
        default_tokenizer.encode(record["text"])
    for noun in P.CONTINUATIONS:
        for continuation in P.CONTINUATIONS[noun]:
            default_tokenizer.encode(" " + continuation)


def test_position_heuristics_score_half_on_probes():
    records = P.probe_records()
    probes = [Probe(**r) for r in records]
    first_noun = sum(p.referent_offset < p.distractor_offset for p in probes) / len(probes)
    nearest_noun = sum(p.referent_offset > p.distractor_offset for p in probes) / len(probes)
    assert first_noun == nearest_noun == 0.5
    # No fixed distance back from the pronoun finds the referent more often than "nearest" does.
    distances = Counter()
    for r in records:
        words = r["text"].split()
        distances[words.index(r["pronoun"]) - words.index(r["referent"])] += 1
    assert max(distances.values()) <= len(records) // 2
    assert len(distances) >= 4
