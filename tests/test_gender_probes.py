"""Gender-agreement probes built from a corpus: people and genders found in the
text, balanced frames, no probe seen in training, seeded output."""

import functools
import json
import random
from pathlib import Path

import pytest
from conftest import shared_file

from data.probes import Probe, load_jsonl
from data.tokenizer import CharTokenizer
from tools import gender_probes as G
from watch.measure.pronouns import baselines

WOMEN = ["Nora", "Ivy", "Beth", "Greta"]
MEN = ["Otto", "Hugo", "Carl", "Felix"]


def story_corpus(seed: int = 0, stories: int = 240, lower: bool = False) -> str:
    """Short stories: a person introduced by name, then referred to by pronoun, plus
    a red herring ("Red", a word that is never a person) and a name of unclear gender."""
    rng = random.Random(seed)
    out = []
    for _ in range(stories):
        gender = rng.choice(["f", "m"])
        name = rng.choice(WOMEN if gender == "f" else MEN)
        pronoun, noun = ("she", "girl") if gender == "f" else ("he", "boy")
        other = rng.choice(["Kim", "Kim", "Kim"])
        out.append(
            f"Once upon a time, there was a little {noun} named {name}. {name} liked to play in the park. "
            f"One day, {pronoun} found a red ball. The red ball was big. {name} was happy and {pronoun} laughed. "
            f"The {noun} went home. Then {pronoun} ate a cake.\n"
            f"A friend named {other} came by. {other} sat down. {rng.choice(['She', 'He'])} smiled.\n"
        )
    text = "\n".join(out)
    return text.lower() if lower else text


@pytest.fixture(scope="module")
def corpus() -> str:
    return story_corpus()


@pytest.fixture(scope="module")
def lexicon(corpus) -> G.Lexicon:
    return G.find_people(corpus, min_count=10, min_evidence=5)


@pytest.mark.parametrize("lower", [False, True])
def test_people_and_genders_come_from_the_text(lower):
    lexicon = G.find_people(story_corpus(lower=lower), min_count=10, min_evidence=5)
    genders = {p.word: p.gender for p in lexicon.people}
    for name in WOMEN:
        assert genders[name.lower()] == G.FEMALE
    for name in MEN:
        assert genders[name.lower()] == G.MALE
    assert genders["girl"] == G.FEMALE and genders["boy"] == G.MALE
    assert "kim" not in genders and "unclear gender" in lexicon.rejected["kim"]  # she and he alike
    assert "red" not in genders
    assert lexicon.lower_case is lower
    surfaces = {p.word: p.surface for p in lexicon.people}
    assert surfaces["nora"] == ("nora" if lower else "Nora")
    assert surfaces["girl"] == "the girl"


def test_a_gender_the_text_contradicts_is_not_taken_from_the_word():
    # "king" is not told to be male anywhere: here the text calls the king "she".
    text = " ".join(["The king sat on the chair. She was tired."] * 30)
    lexicon = G.find_people(text, min_count=10, min_evidence=5)
    assert [(p.word, p.gender) for p in lexicon.people] == [("king", G.FEMALE)]


def test_evidence_counts_only_contexts_with_one_candidate():
    sentences = ["Nora met Otto.", "She smiled.", "Nora sat down.", "She was glad.", "Otto ran.", "He fell."]
    evidence = G.pronoun_evidence(sentences, ["nora", "otto"])
    # "She smiled." follows a sentence naming both: not counted.
    assert evidence == {"nora": (1, 0), "otto": (0, 1)}


def aligned_probes(records):
    tokenizer = CharTokenizer.from_text("".join(r["text"] for r in records))
    return [Probe(**r).align(tokenizer) for r in records]


def test_every_frame_is_balanced_so_position_heuristics_score_half(lexicon):
    generated = G.generate(lexicon, ["coordination", "subordinate", "sentence", "object", "speech"], 60, seed=3)
    records = generated.probes
    assert len(records) == 240
    aligned = aligned_probes(records)
    scores = baselines(aligned)
    assert scores["first_noun"] == 0.5
    assert scores["nearest_noun"] == 0.5
    # "The subject" ({A}, the first person slot of every frame), "always the woman",
    # "always the name over the noun": each right in exactly half of every group.
    for start in range(0, len(records), 4):
        group = records[start : start + 4]
        meta = generated.meta[start : start + 4]
        assert sum(m["referent_first"] for m in meta) == 2
        assert sum(m["referent_gender"] == G.FEMALE for m in meta) == 2
        assert sum(r["pronoun"].lower() == "she" for r in group) == 2
        assert len({r["text"] for r in group}) == 4
        assert len({(r["referent"], r["distractor"]) for r in group}) == 2
    for item in aligned:  # the pronoun comes after both people, and neither is the first token (the sink)
        assert item.pronoun_pos > max(item.referent_positions + item.distractor_positions)
        assert min(item.referent_positions + item.distractor_positions) > 0


def test_probes_load_and_point_at_their_words(lexicon, tmp_path):
    generated = G.generate(lexicon, ["coordination", "object"], 10, seed=1)
    path = tmp_path / "probes.jsonl"
    G.write_jsonl(path, generated.probes)
    probes = load_jsonl(path, Probe)
    assert len(probes) == 40
    for probe in probes:
        for name in ("pronoun", "referent", "distractor"):
            start, end = probe.span(name)
            assert probe.text[start:end] == getattr(probe, name)
        assert probe.pronoun.lower() in ("she", "he")


def test_lower_case_corpus_gives_lower_case_probes():
    lexicon = G.find_people(story_corpus(lower=True), min_count=10, min_evidence=5)
    generated = G.generate(lexicon, list(G.FAMILIES), 20, seed=0)
    assert all(r["text"] == r["text"].lower() for r in generated.probes)
    items = G.agreement_items(lexicon, seed=0)
    assert all(i["text"] == i["text"].lower() and i["pronoun"] in ("she", "he") for i in items)


def test_seeded_and_deterministic(lexicon, corpus):
    def run(seed):
        return G.generate(lexicon, ["coordination", "sentence"], 12, seed=seed, corpus=corpus).probes

    assert run(5) == run(5)
    assert run(5) != run(6)
    assert G.find_people(corpus, min_count=10, min_evidence=5) == G.find_people(corpus, min_count=10, min_evidence=5)
    assert G.agreement_items(lexicon, seed=2) == G.agreement_items(lexicon, seed=2)


def test_a_probe_planted_in_the_training_text_is_caught(lexicon, corpus):
    first = G.generate(lexicon, ["subordinate"], 8, seed=4)
    planted_text = first.probes[0]["text"]
    # Other spacing and case than the probe: still the same sentence.
    planted = corpus + "\n" + planted_text.upper().replace(" ", "  ") + "\n"
    assert G.SeenCheck(planted).seen(planted_text)
    assert not G.SeenCheck(corpus).seen(planted_text)
    again = G.generate(lexicon, ["subordinate"], 8, seed=4, corpus=planted)
    assert again.dropped_seen >= 1
    assert planted_text not in {r["text"] for r in again.probes}
    assert len(again.probes) == 32  # the group was replaced, whole
    # Planting only the part from the first name to the pronoun is caught too.
    record = first.probes[5]
    start = min(record["referent_offset"], record["distractor_offset"])
    stretch = record["text"][start : record["pronoun_offset"] + len(record["pronoun"])]
    third = G.generate(lexicon, ["subordinate"], 8, seed=4, corpus=corpus + " " + stretch + " ")
    assert record["text"] not in {r["text"] for r in third.probes}


def test_agreement_contexts_end_before_an_agreeing_pronoun(lexicon):
    items = G.agreement_items(lexicon, seed=0)
    assert {i["mention"] for i in items} == {"first", "second"}
    assert sum(i["gender"] == G.FEMALE for i in items) == sum(i["gender"] == G.MALE for i in items)
    for item in items:
        assert item["pronoun"].lower() == G.PRONOUN[item["gender"]]
        assert item["wrong"].lower() != item["pronoun"].lower()
        ends_sentence = item["text"].endswith((".", "!", "?"))
        assert item["pronoun"][0].isupper() == ends_sentence
        assert item["person"] in item["text"]


def test_cli_keeps_the_heldout_family_apart(tmp_path, corpus):
    path = tmp_path / "corpus.txt"
    path.write_text(corpus)
    out, held, agree = tmp_path / "main.jsonl", tmp_path / "held.jsonl", tmp_path / "agree.jsonl"
    code = G.main(
        [
            "--corpus",
            str(path),
            "--out",
            str(out),
            "--heldout",
            str(held),
            "--agreement",
            str(agree),
            "--groups",
            "20",
            "--heldout_groups",
            "6",
            "--min_count",
            "10",
            "--min_evidence",
            "5",
            "--no_vocab_check",
        ]
    )
    assert code == 0
    main_meta = json.loads(out.with_suffix(".meta.json").read_text())
    held_meta = json.loads(held.with_suffix(".meta.json").read_text())
    assert G.HELDOUT_FAMILY not in main_meta["families"]
    assert held_meta["families"] == [G.HELDOUT_FAMILY]
    assert {m["family"] for m in held_meta["probes"]} == {G.HELDOUT_FAMILY}
    assert len(load_jsonl(out, Probe)) == 80 and len(load_jsonl(held, Probe)) == 24
    assert not {p.text for p in load_jsonl(out, Probe)} & {p.text for p in load_jsonl(held, Probe)}
    assert agree.read_text().strip()


PROBE_FILES = Path(__file__).resolve().parent.parent / "data" / "probes"


@functools.cache
def corpus_people(filename: str) -> tuple[str, G.Lexicon]:
    corpus = shared_file(f"data/{filename}").read_text(encoding="utf-8")
    return corpus, G.find_people(corpus)


@pytest.mark.parametrize("name,lower", [("subset", False), ("lower", True)])
@pytest.mark.parametrize("part", ["", "-heldout"])
def test_committed_probe_files_are_what_the_generator_writes(name, lower, part):
    """data/probes/gender-*.jsonl: regenerated here with the settings they were made with."""
    committed = PROBE_FILES / f"gender-{name}{part}.jsonl"
    meta = json.loads(committed.with_suffix(".meta.json").read_text())
    corpus, lexicon = corpus_people(meta["corpus"])
    assert meta["lower_case"] is lower
    generated = G.generate(lexicon, meta["families"], meta["groups"], meta["seed"], corpus=corpus)
    records = [json.loads(line) for line in committed.read_text().splitlines()]
    # The committed file may have dropped whole groups with tokens outside the vocabulary.
    kept = {m["group"] for m in meta["probes"]}
    expected = [r for r, m in zip(generated.probes, generated.meta, strict=True) if m["group"] in kept]
    assert records == expected
    check = G.SeenCheck(corpus)
    assert not any(check.seen(stretch) for record in records for stretch in G.probe_stretches(record))


@pytest.mark.parametrize("name", ["subset", "lower"])
def test_committed_agreement_files_are_what_the_generator_writes(name):
    meta = json.loads((PROBE_FILES / f"gender-{name}.meta.json").read_text())
    corpus, lexicon = corpus_people(meta["corpus"])
    committed = PROBE_FILES / f"gender-{name}-agreement.jsonl"
    records = [json.loads(line) for line in committed.read_text().splitlines()]
    assert records == G.agreement_items(lexicon, meta["seed"], corpus=corpus)
