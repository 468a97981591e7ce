"""Probe loading and alignment of words to token positions."""

import json
import re

import pytest
from conftest import shared_file

from common.errors import UserError
from data import pronouns as P
from data.probes import Probe, load_jsonl
from data.tokenizer import CharTokenizer, GPT2Tokenizer, TokenizerError

TINYSTORIES_PROBES = "data/probes/tinystories.jsonl"


@pytest.fixture(scope="module")
def corpus() -> str:
    # Large enough that every continuation of every noun occurs at least once.
    return P.training_text(seed=11, n_sentences=2000) + P.EXPLANATION_SENTENCE + " and xe smiled .\n"


@pytest.fixture(scope="module")
def gpt2(corpus) -> GPT2Tokenizer:
    return GPT2Tokenizer.from_text(corpus)


@pytest.fixture(scope="module")
def char(corpus) -> CharTokenizer:
    return CharTokenizer.from_text(corpus)


def joined(aligned, positions) -> str:
    return "".join(aligned.tokens[i] for i in positions)


def test_a_word_split_by_bpe_gets_all_its_positions(gpt2):
    probe = Probe(P.EXPLANATION_SENTENCE, pronoun="she", referent="fetched", distractor="ball")
    aligned = probe.align(gpt2)
    assert [aligned.tokens[i] for i in aligned.referent_positions] == [" fet", "ched"]
    assert [aligned.tokens[i] for i in aligned.distractor_positions] == [" ball"]
    assert aligned.tokens[aligned.pronoun_pos] == " she"
    kite = Probe("The kite hit the king and he laughed loudly .", "he", "king", "kite").align(gpt2)
    assert [kite.tokens[i] for i in kite.distractor_positions] == [" k", "ite"]


def test_char_alignment_covers_each_letter(char):
    probe = Probe("The dog fetched the ball and she was happy", "she", "dog", "ball")
    aligned = probe.align(char)
    assert aligned.referent_positions == [4, 5, 6]
    assert joined(aligned, aligned.distractor_positions) == "ball"
    assert aligned.tokens == list(probe.text)


@pytest.mark.parametrize("name", ["gpt2", "char"])
def test_pronoun_query_is_its_last_sub_token(name, request):
    tokenizer = request.getfixturevalue(name)
    text = "The dog fetched the ball and xe smiled ."
    aligned = Probe(text, "xe", "dog", "ball").align(tokenizer)
    # "xe" is two tokens in both vocabularies: " x"+"e" and "x"+"e".
    assert aligned.tokens[aligned.pronoun_pos - 1 : aligned.pronoun_pos + 1] in ([" x", "e"], ["x", "e"])
    assert aligned.continuation_pos in (aligned.pronoun_pos, aligned.pronoun_pos + 1)


def test_gpt2_continuation_is_predicted_at_the_pronoun(gpt2):
    record = P.probe_records(seed=11)[0]
    aligned = Probe(**record).align(gpt2)
    assert aligned.continuation_pos == aligned.pronoun_pos
    assert aligned.continuation_ids == [gpt2.encode(" " + w)[0] for w in record["continuations"]]
    assert aligned.distractor_continuation_ids == [gpt2.encode(" " + w)[0] for w in record["distractor_continuations"]]
    assert aligned.ids[aligned.continuation_pos + 1] in aligned.continuation_ids  # the text's own next word
    assert not set(aligned.continuation_ids) & set(aligned.distractor_continuation_ids)


def test_char_continuation_is_predicted_at_the_space(char):
    probe = Probe(
        "The dog fetched the ball and she barked .",
        "she",
        "dog",
        "ball",
        continuations=["barked", "bit", "wagged"],
        distractor_continuations=["rolled"],
    )
    aligned = probe.align(char)
    assert aligned.continuation_pos == aligned.pronoun_pos + 1
    assert aligned.tokens[aligned.continuation_pos] == " "
    assert aligned.continuation_ids == char.encode("bw")  # deduplicated first letters
    assert aligned.distractor_continuation_ids == char.encode("r")


@pytest.mark.parametrize("name", ["gpt2", "char"])
def test_without_continuations_the_next_word_is_the_continuation(name, request):
    tokenizer = request.getfixturevalue(name)
    aligned = Probe("The dog fetched the ball and she barked loudly .", "she", "dog", "ball").align(tokenizer)
    assert aligned.continuation_ids == [aligned.ids[aligned.continuation_pos + 1]]
    assert aligned.distractor_continuation_ids == []
    assert tokenizer.decode(aligned.continuation_ids) in (" barked", " bark", "b")


def test_no_continuation_position_when_the_model_never_sees_that_context(char, gpt2):
    probe = Probe("The dog fetched the ball and she", "she", "dog", "ball", continuations=["barked"])
    assert probe.align(char).continuation_pos is None  # the space before "barked" is not in the text
    assert probe.align(gpt2).continuation_pos == len(gpt2.encode(probe.text)) - 1
    end = Probe("The dog fetched the ball and she", "she", "dog", "ball").align(gpt2)
    assert end.continuation_pos is None and end.continuation_ids == []


def test_offsets_override_word_search(gpt2):
    text = "then he saw the dog and the ball hit the dog and he barked ."
    found = Probe(text, "he", "dog", "ball")
    assert (found.referent_offset, found.pronoun_offset) == (text.index("dog"), text.rindex("he "))
    chosen = Probe(text, "he", "dog", "ball", referent_offset=text.rindex("dog"), pronoun_offset=5)
    a, b = found.align(gpt2), chosen.align(gpt2)
    assert a.referent_positions != b.referent_positions
    assert joined(b, b.referent_positions) == " dog" and b.referent_positions[0] > b.distractor_positions[0]
    assert b.pronoun_pos == 1
    with pytest.raises(UserError, match="points at 'saw'"):
        Probe(text, "he", "dog", "ball", referent_offset=8)


def test_pronoun_defaults(gpt2):
    # Before the nouns, "it" is a different use; only the one after both counts.
    text = "it was the cup that hit the king and it fell ."
    assert Probe(text, "it", "cup", "king").pronoun_offset == text.rindex("it")
    # With none after the nouns, the last occurrence is taken.
    assert Probe("she saw the dog and the ball", "she", "dog", "ball").pronoun_offset == 0
    # Case and whole words: "The" is not "he", "Dog" is "dog".
    assert Probe("The Dog saw the ball and he ran", "he", "dog", "ball").pronoun_offset == 25


def test_unknown_text_raises_the_tokenizer_error(char, gpt2):
    with pytest.raises(TokenizerError):
        Probe("The Zebra saw the ball and it rolled away .", "it", "ball", "Zebra").align(char)
    with pytest.raises(TokenizerError):
        Probe("The dog saw the ball and it rolled away .", "it", "ball", "dog", continuations=["xylophoned"]).align(
            gpt2
        )


def write_lines(tmp_path, *lines: str):
    path = tmp_path / "probes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps(
    {"text": "the dog saw the ball and she ran .", "pronoun": "she", "referent": "dog", "distractor": "ball"}
)


@pytest.mark.parametrize(
    "bad, problem",
    [
        ("{not json", "not valid JSON"),
        ('{"text": "the dog ran", "pronoun": "he", "referent": "dog"}', "missing field.*'distractor'"),
        (
            '{"text": "the dog saw the ball", "pronoun": "she", "referent": "cat", "distractor": "ball"}',
            "referent 'cat' does not occur",
        ),
        (
            '{"text": "the dog saw a ball and he ran", "pronoun": "he", "referent": "dog", "distractor": "ball",'
            ' "continuation": ["ran"]}',
            "unknown field.*'continuation'",
        ),
        (
            '{"text": "the dog saw a ball and he ran", "pronoun": "he", "referent": "dog", "distractor": "ball",'
            ' "continuations": "ran"}',
            "field 'continuations' must be a list of non-empty words",
        ),
        (
            '{"text": "the dog saw a ball and he ran", "pronoun": "he", "referent": "dog", "distractor": "ball",'
            ' "referent_offset": true}',
            "field 'referent_offset' must be an integer, got True",
        ),
        (
            '{"text": "the dog saw a ball and he ran", "pronoun": " ", "referent": "dog", "distractor": "ball"}',
            "field 'pronoun' must be a non-empty string",
        ),
        ('["a list"]', "expected a JSON object"),
        (
            '{"text": "the dog saw the ball", "pronoun": "it", "referent": "dog", "distractor": "dog"}',
            "distractor 'dog' is the same word as the referent, and occurs only once",
        ),
        (
            '{"text": "the dog saw it", "pronoun": "it", "referent": "dog", "distractor": "it"}',
            "the pronoun 'it' and the distractor 'it' are the same place in the text",
        ),
        (
            '{"text": "the big dog saw it", "pronoun": "it", "referent": "big dog", "distractor": "dog"}',
            "the referent 'big dog' and the distractor 'dog' are the same place",
        ),
    ],
)
def test_load_errors_name_the_file_and_line(tmp_path, bad, problem):
    path = write_lines(tmp_path, GOOD, "", bad)
    with pytest.raises(UserError) as info:
        load_jsonl(path, Probe)
    message = str(info.value)
    assert f"{path} line 3: " in message and re.search(problem, message)
    assert "\n" not in message


def test_load_errors_for_missing_and_empty_files(tmp_path):
    with pytest.raises(UserError, match="probe file .*nowhere.jsonl not found"):
        load_jsonl(tmp_path / "nowhere.jsonl", Probe)
    with pytest.raises(UserError, match="holds no probes"):
        load_jsonl(write_lines(tmp_path, "", "  "), Probe)


def test_write_then_load_round_trip(tmp_path):
    records = P.probe_records(seed=3)[:6]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    probes = load_jsonl(tmp_path / "p.jsonl", Probe)
    assert [Probe(**r) for r in records] == probes
    assert [p.continuations for p in probes] == [r["continuations"] for r in records]


def test_generated_probes_align_on_their_nouns(gpt2, char):
    probes = [Probe(**r) for r in P.probe_records(seed=11)[:40]]
    for tokenizer in (gpt2, char):
        for aligned in (probe.align(tokenizer) for probe in probes):
            p = aligned.probe
            assert joined(aligned, aligned.referent_positions).strip() == p.referent
            assert joined(aligned, aligned.distractor_positions).strip() == p.distractor
            assert p.pronoun.endswith(aligned.tokens[aligned.pronoun_pos].strip())
            assert max(aligned.referent_positions + aligned.distractor_positions) < aligned.pronoun_pos


def test_tinystories_probes_fit_tinystories():
    text = shared_file("data/tinystories_subset.txt").read_text()
    probes = load_jsonl(TINYSTORIES_PROBES, Probe)
    assert len(probes) >= 25
    first = sum(p.referent_offset < p.distractor_offset for p in probes)
    assert abs(2 * first - len(probes)) <= 2
    assert {p.pronoun for p in probes} == {"he", "she", "it"}
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
    for probe in probes:
        assert set(re.findall(r"[a-z]+", probe.text.lower())) <= words, probe.text
    for tokenizer in (GPT2Tokenizer.from_text(text), CharTokenizer.from_text(text)):
        for aligned in (probe.align(tokenizer) for probe in probes):
            assert aligned.continuation_pos is not None and len(aligned.continuation_ids) == 1


def test_probes_remember_their_line_and_a_byte_order_mark_is_no_probe(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + f"{GOOD}\n\n{GOOD}\n".encode())
    assert [probe.line for probe in load_jsonl(path, Probe)] == [1, 3]


def test_a_probe_file_that_is_a_named_pipe_is_refused_without_waiting(tmp_path):
    import os

    os.mkfifo(tmp_path / "p.jsonl")
    with pytest.raises(UserError, match="not a regular file"):
        load_jsonl(tmp_path / "p.jsonl", Probe)
