"""Gender-agreement pronoun probes built from a training corpus.

A two-person probe names a woman or girl and a man or boy, then a pronoun that
can only mean one of them:

    {"text": "Lily played with Tom in the garden, and he laughed a lot.",
     "pronoun": "he", "referent": "Tom", "distractor": "Lily", ...offsets}

The people come from the corpus itself, with the gender the corpus gives them:

1. Candidates. Names are words the text introduces with "named X" / "called X"
   often enough, and that are mostly names where they occur (in a capitalised
   text, capitalised mid-sentence; in any text, "named X" is a fair share of
   all uses of X, which drops "out" in "called out" and words like "rose").
   Person nouns (girl, boy, mom, dad, queen, king, ...) come from a fixed list
   of candidates whose genders are *not* given: the text decides them too.
2. Gender. For every sentence that mentions exactly one candidate, in it and
   in the next sentence, the subject pronouns "she" and "he" after the mention
   are counted. A person is kept when one pronoun has at least `min_share` of
   those counts and at least `min_evidence` of them, and the word occurs at
   least `min_count` times.

Frames come in families (coordination, subordinate clauses, a second sentence,
both names as objects or far from the pronoun, and quoted speech). Each chosen
(frame, woman, man) triple is written four times: both name orders times both
pronouns. So any rule that looks only at positions or roles ("first noun",
"nearest noun", "the subject") or only at one gender ("always the woman") is
right in exactly half of the probes. A group is dropped whole (keeping that
balance) when any of its four sentences, or the stretch from the first name to
the pronoun, occurs in the training text (case and spacing ignored).

Every probe starts with a short sentence about the day ("It was a sunny day."),
so that no person sits at the first position, where small models park idle
attention (the "attention sink"), which would pass for attention to that person.

One family (by default `speech`) is never mixed into the main file: it goes to
a separate held-out file, a final check on frames never used for tuning.

Agreement items test the behaviour instead of the attention: a context with a
single person, cut just before a pronoun ("Lily went to the park and"), whose
next word should be "she" rather than "he".

    python -m tools.gender_probes --corpus ../shared/data/tinystories_subset.txt \\
        --out data/probes/gender-subset.jsonl --heldout data/probes/gender-subset-heldout.jsonl \\
        --agreement data/probes/gender-subset-agreement.jsonl

Everything is seeded: the same corpus, settings and seed give the same files.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.cli import run_cli
from common.errors import UsageError, UserError

FEMALE, MALE = "female", "male"
PRONOUN = {FEMALE: "she", MALE: "he"}

# Nouns that can name a person; the corpus decides each one's gender (and drops
# the ones it does not use clearly and often). Kinship words that stories use
# like names ("Mom said") are written without an article.
PERSON_NOUNS = (
    "girl",
    "boy",
    "mom",
    "dad",
    "mommy",
    "daddy",
    "mother",
    "father",
    "queen",
    "king",
    "princess",
    "prince",
    "sister",
    "brother",
    "grandma",
    "grandpa",
    "lady",
    "man",
    "woman",
    "aunt",
    "uncle",
    "daughter",
    "son",
    "wife",
    "husband",
)
BARE_NOUNS = frozenset({"mom", "dad", "mommy", "daddy", "grandma", "grandpa"})

_WORD = re.compile(r"[A-Za-z]+")
_LETTER, _CAPITAL = re.compile(r"[A-Za-z]"), re.compile(r"[A-Z]")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"']?\s+")


# --- finding people ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    word: str  # lower-case key ("lily", "girl")
    gender: str  # FEMALE or MALE
    surface: str  # how a probe writes it mid-sentence ("Lily", "the girl", "mom")
    kind: str  # "name" or "noun"
    count: int  # occurrences of the word in the corpus
    she: int  # pronoun evidence from single-candidate contexts
    he: int

    @property
    def head(self) -> str:
        """The word a probe points at (the name, or the noun without its article)."""
        return self.surface.split()[-1]

    def at_start(self) -> str:
        return self.surface[0].upper() + self.surface[1:]


@dataclass
class Lexicon:
    people: list[Person]
    lower_case: bool
    rejected: dict[str, str] = field(default_factory=dict)  # word -> why it was left out

    def of(self, gender: str, kind: str | None = None) -> list[Person]:
        return [p for p in self.people if p.gender == gender and (kind is None or p.kind == kind)]


def is_lower_case(text: str) -> bool:
    """True for a corpus written without capitals (then probes must be lower case too)."""
    letters = len(_LETTER.findall(text))
    return letters > 0 and len(_CAPITAL.findall(text)) / letters < 0.001


def split_sentences(text: str) -> list[str]:
    return [s for s in (part.strip() for part in _SENTENCE_END.split(text)) if s]


STOPWORDS = frozenset(
    {
        "he",
        "she",
        "him",
        "her",
        "his",
        "hers",
        "it",
        "its",
        "they",
        "them",
        "their",
        "the",
        "a",
        "an",
        "to",
        "for",
        "out",
        "me",
        "you",
        "we",
        "us",
        "my",
        "your",
        "i",
        "mr",
        "mrs",
        "miss",
        "and",
        "but",
        "so",
        "then",
        "one",
        "once",
        "god",
    }
)
DETERMINERS = frozenset({"the", "a", "an", "this", "that", "my", "your", "his", "her", "their", "our", "some"})


def _forms(text: str) -> dict[str, Counter]:
    """How each word is written mid-sentence (a sentence's first word is capitalised whatever it is)."""
    forms: dict[str, Counter] = {}
    for m in re.finditer(r"(?<![.!?\"'\n:])[ \t]+([A-Za-z]+)", text):
        word = m.group(1)
        forms.setdefault(word.lower(), Counter())[word] += 1
    return forms


def name_candidates(
    text: str,
    min_named: int = 2,
    min_count: int = 20,
    min_named_share: float = 0.005,
    max_determined: float = 0.05,
    min_capitalised: float = 0.9,
) -> tuple[dict[str, str], dict[str, str]]:
    """Words used as names: {word: surface form}, and the rejected ones with why.

    Every text: words introduced as "named X" / "called X" at least `min_named` times.
    A capitalised text adds the words written capitalised mid-sentence at least
    `min_count` times, and keeps only words capitalised in `min_capitalised` of their
    mid-sentence uses. A lower-case text cannot show that, so there a name must be
    introduced with "named" in at least `min_named_share` of its uses and follow a
    determiner ("the", "a", "his", ...) in at most `max_determined` of them, as
    names rarely do ("the red ball", "a bear" are dropped)."""
    lower_words = [w.lower() for w in _WORD.findall(text)]
    counts = Counter(lower_words)
    named = Counter(m.group(1).lower() for m in re.finditer(r"\b(?:named|called)\s+([A-Za-z]+)\b", text, re.I))
    lower = is_lower_case(text)
    forms = {} if lower else _forms(text)
    pool = {w for w, n in named.items() if n >= min_named}
    if not lower:
        pool |= {w for w, seen in forms.items() if sum(v for k, v in seen.items() if k[0].isupper()) >= min_count}
    determined = Counter(b for a, b in zip(lower_words, lower_words[1:], strict=False) if a in DETERMINERS)
    accepted, rejected = {}, {}
    for word in sorted(pool):
        if word in PERSON_NOUNS or word in STOPWORDS or len(word) < 2:
            continue
        surface = word
        if lower:
            share = named[word] / counts[word]
            if share < min_named_share:
                rejected[word] = f"'named {word}' is only {share:.1%} of its {counts[word]} uses"
                continue
            det = determined[word] / counts[word]
            if det > max_determined:
                rejected[word] = f"follows a determiner in {det:.0%} of its uses"
                continue
        else:
            seen = forms.get(word, Counter())
            total = sum(seen.values())
            capitalised = sum(v for k, v in seen.items() if k[0].isupper())
            if not total or capitalised / total < min_capitalised:
                rejected[word] = f"capitalised in only {capitalised}/{total} mid-sentence uses"
                continue
            surface = max((k for k in seen if k[0].isupper()), key=lambda k: (seen[k], k))
        accepted[word] = surface
    return accepted, rejected


def pronoun_evidence(sentences: Sequence[str], candidates: Iterable[str]) -> dict[str, tuple[int, int]]:
    """(she, he) counted after each mention in contexts where the candidate is the only one.

    A context is a sentence that mentions a candidate plus the sentence after
    it; it counts only when no other candidate occurs in it, and then the
    subject pronouns after the first mention are counted."""
    candidates = set(candidates)
    words = [[w.lower() for w in _WORD.findall(s)] for s in sentences]
    she, he = Counter(), Counter()
    for i, ws in enumerate(words):
        first = next((j for j, w in enumerate(ws) if w in candidates), None)
        if first is None:
            continue
        window = ws + (words[i + 1] if i + 1 < len(words) else [])
        present = {w for w in window if w in candidates}
        if len(present) != 1:
            continue
        (word,) = present
        after = window[first + 1 :]
        she[word] += after.count("she")
        he[word] += after.count("he")
    return {w: (she[w], he[w]) for w in candidates}


def find_people(
    text: str, *, min_count: int = 20, min_evidence: int = 10, min_share: float = 0.8, min_named: int = 2
) -> Lexicon:
    """Names and person nouns the corpus uses often, each with the gender the corpus gives it."""
    lower = is_lower_case(text)
    names, rejected = name_candidates(text, min_named=min_named, min_count=min_count)
    counts = Counter(w.lower() for w in _WORD.findall(text))
    forms = {} if lower else _forms(text)

    def noun_surface(word: str) -> str:
        if word not in BARE_NOUNS:
            return f"the {word}"
        seen = forms.get(word)  # "Mom" where a capitalised text uses it as a name
        return max(seen, key=lambda k: (seen[k], k)) if seen else word

    candidates = {
        **{w: ("name", s) for w, s in names.items()},
        **{w: ("noun", noun_surface(w)) for w in PERSON_NOUNS if counts[w]},
    }
    evidence = pronoun_evidence(split_sentences(text), candidates)
    people = []
    for word in sorted(candidates):
        kind, surface = candidates[word]
        she, he = evidence[word]
        total = she + he
        if counts[word] < min_count:
            rejected[word] = f"occurs {counts[word]} times (< {min_count})"
            continue
        if total < min_evidence:
            rejected[word] = f"only {total} pronouns after it (< {min_evidence})"
            continue
        share = max(she, he) / total
        if share < min_share:
            rejected[word] = f"unclear gender: she {she}, he {he}"
            continue
        gender = FEMALE if she > he else MALE
        people.append(Person(word, gender, surface, kind, counts[word], she, he))
    people.sort(key=lambda p: (-p.count, p.word))
    return Lexicon(people, lower, rejected)


# --- frames ---------------------------------------------------------------------------------------

# {A} and {B} are the two people in order, {P} the pronoun; {Ac}, {Bc}, {Pc}
# are the same capitalised, for the start of a sentence.
FAMILIES: dict[str, tuple[str, ...]] = {
    "coordination": (
        "{Ac} and {B} went to the park, and {P} found a red ball.",
        "{Ac} played with {B} in the garden, and {P} laughed a lot.",
        "{Ac} gave {B} a big hug, and {P} smiled.",
        "{Ac} ran after {B} and {P} fell down.",
        "{Ac} and {B} ate some cake, but {P} wanted more.",
        "{Ac} showed {B} a pretty flower, so {P} was happy.",
        "{Ac} and {B} built a sand castle, and then {P} went home.",
        "{Ac} met {B} at the store and {P} bought a toy.",
        "{Ac} looked at {B}, and {P} started to sing.",
        "{Ac} helped {B} clean the room, but {P} was tired.",
        "{Ac} and {B} jumped in the big puddle and {P} got wet.",
        "{Ac} drew a picture with {B}, and {P} used a blue crayon.",
    ),
    "subordinate": (
        "{Ac} hugged {B} because {P} was sad.",
        "{Ac} called {B} because {P} needed help.",
        "{Ac} waited for {B} while {P} was at the store.",
        "{Ac} smiled at {B} when {P} came home.",
        "{Ac} and {B} went inside because {P} was cold.",
        "{Ac} thanked {B} after {P} fixed the toy.",
        "{Ac} played with {B} until {P} got tired.",
        "{Ac} made a cake for {B} because {P} loved sweet things.",
        "{Ac} sat with {B} on the bench while {P} ate an apple.",
        "{Ac} and {B} stayed in bed because {P} felt sick.",
        "{Ac} was happy to see {B}, but then {P} had to go.",
        "{Ac} read a book to {B} before {P} went to sleep.",
    ),
    "sentence": (
        "{Ac} and {B} played with a ball. Then {P} ran home.",
        "{Ac} saw {B} at the park. {Pc} waved and smiled.",
        "{Ac} gave {B} a toy. {Pc} was very happy.",
        "{Ac} and {B} went to the beach. {Pc} found a shell.",
        "{Ac} talked to {B} for a long time. Later, {P} went to bed.",
        "{Ac} sat next to {B} under a tree. {Pc} liked the shade.",
        "{Ac} and {B} looked at the stars. Soon {P} fell asleep.",
        "{Ac} found {B} in the garden. {Pc} was looking for a bug.",
        "{Ac} and {B} had a picnic. After lunch, {P} took a nap.",
        "{Ac} went to the lake with {B}. {Pc} wanted to swim.",
        "{Ac} baked cookies with {B}. {Pc} ate three of them.",
        "{Ac} and {B} climbed the hill. At the top, {P} saw a bird.",
    ),
    "object": (
        "A ball rolled to {A} and {B}, and {P} picked it up.",
        "There was a cake for {A} and {B} on the table. {Pc} took a big piece.",
        "It was a sunny day when {A} and {B} went to the lake. {Pc} jumped into the water.",
        "The wind blew the hats of {A} and {B} away, and {P} ran after them.",
        "The rain fell on {A} and {B}, so {P} opened an umbrella.",
        "One day, {A} and {B} went for a walk in the woods. It was very quiet. {Pc} heard a sound.",
        "A big box came for {A} and {B}. Inside, there was a kite. {Pc} wanted to fly it.",
        "The sun was warm, so {A} and {B} went out to play. After a while, {P} got hot.",
        "Once upon a time, {A} and {B} lived in a small house. Every day, {P} went to the garden.",
        "A little bird sang to {A} and {B}, and {P} sang back.",
    ),
    "speech": (
        '{Ac} said to {B}, "Let us play!" Then {P} ran outside.',
        '"Look at the bird!" {A} said to {B}. {Pc} pointed at the sky.',
        '{Ac} asked {B}, "Do you want to play?" {Pc} was excited.',
        '"I am hungry," said {A} to {B}. So {P} got some food.',
        '{Ac} told {B}, "I like your hat." {Pc} smiled.',
        '"Come with me," {A} said to {B}, and {P} walked to the park.',
        '{Ac} whispered to {B}, "I have a secret." Then {P} giggled.',
        '"We can share," {A} told {B}. {Pc} gave away a cookie.',
    ),
}
HELDOUT_FAMILY = "speech"

# Every probe and agreement context starts with one of these sentences, so that no
# person is the first token: models park idle attention on the first position (an
# "attention sink"), which would otherwise pass for attention to a person there.
# One lead-in per group, so the four probes of a group differ only in order and pronoun.
LEAD_INS = (
    "It was a sunny day.",
    "The sun was warm.",
    "It was a nice morning.",
    "The sky was blue.",
    "It was a quiet day.",
    "It was a cold day.",
    "The day was bright.",
    "The grass was green.",
)

# Single-person contexts for agreement, cut just before the pronoun. "first": the
# pronoun is the first word to refer back to the person; "second": the person was
# named and then already referred to once ({P}), so the model may copy the gender
# from the name or from that pronoun.
AGREEMENT_FRAMES: dict[str, tuple[str, ...]] = {
    "first": (
        "{Ac} went to the park and",
        "{Ac} found a big box.",
        "{Ac} was very happy because",
        "{Ac} looked at the sky and",
        "One day, {A} saw a little bird.",
        "{Ac} wanted to play, so",
        "{Ac} ate an apple. Then",
        "When {A} woke up,",
        "{Ac} ran to the tree, but",
        "Once upon a time, {A} had a red kite.",
    ),
    "second": (
        "{Ac} went to the park. {Pc} saw a dog and",
        "{Ac} found a ball. {Pc} played with it all day. Then",
        "{Ac} was sad. {Pc} lost a toy, so",
        "{Ac} had a new hat. {Pc} liked it a lot because",
        "{Ac} walked to school. On the way, {P} saw a cat.",
        "One day, {A} made a cake. {Pc} was proud, and",
    ),
}


def _fill(frame: str, a: Person, b: Person | None, pronoun: str) -> str:
    values = {"A": a.surface, "Ac": a.at_start(), "P": pronoun, "Pc": pronoun.capitalize()}
    if b is not None:
        values.update({"B": b.surface, "Bc": b.at_start()})
    return frame.format(**values)


def _slot_offsets(frame: str, a: Person, b: Person | None, pronoun: str) -> dict[str, int]:
    """Character offset of each slot's head word in the filled frame."""
    offsets: dict[str, int] = {}
    out_len = 0
    pos = 0
    for match in re.finditer(r"\{(\w+)\}", frame):
        out_len += match.start() - pos
        key = match.group(1)
        value = _fill("{" + key + "}", a, b, pronoun)
        slot = key[0]
        if slot in "AB":
            person = a if slot == "A" else b
            offsets.setdefault(slot, out_len + len(value) - len(person.head))
        else:
            offsets.setdefault(slot, out_len)
        out_len += len(value)
        pos = match.end()
    return offsets


# --- probes -------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Lower case, single spaces, ASCII quotes: how probes are compared with the corpus."""
    text = text.replace("\u201c", '"').replace("\u201d", '"').replace("\u2018", "'").replace("\u2019", "'")
    return re.sub(r"\s+", " ", text.lower()).strip()


class SeenCheck:
    """Whether a probe's text occurs in a corpus (case and spacing ignored)."""

    def __init__(self, corpus: str) -> None:
        self.corpus = normalise(corpus)

    def seen(self, text: str) -> bool:
        return normalise(text) in self.corpus


def probe_stretches(record: dict) -> list[str]:
    """What must not occur in the training text: the whole probe, and its stretch from the first
    candidate to the pronoun (the part the attention is measured on)."""
    text = record["text"]
    start = min(record["referent_offset"], record["distractor_offset"])
    end = record["pronoun_offset"] + len(record["pronoun"])
    return [text, text[start:end]]


@dataclass
class Generated:
    probes: list[dict]  # records as data.probes.load_jsonl reads them
    meta: list[dict]  # one per probe: family, frame, group
    dropped_seen: int  # groups dropped because a sentence occurs in the corpus


def make_group(frame: str, woman: Person, man: Person, lower: bool, lead: str = "") -> list[dict]:
    """The four probes of one (frame, woman, man): both orders times both pronouns, after `lead`."""
    shift = len(lead) + 1 if lead else 0
    group = []
    for first, second in ((woman, man), (man, woman)):
        for referent in (woman, man):
            distractor = man if referent is woman else woman
            pronoun = PRONOUN[referent.gender]
            body = _fill(frame, first, second, pronoun)
            text = f"{lead} {body}" if lead else body
            offsets = {k: v + shift for k, v in _slot_offsets(frame, first, second, pronoun).items()}
            slot_of = {id(first): "A", id(second): "B"}
            record = {
                "text": text,
                "pronoun": text[offsets["P"] : offsets["P"] + len(pronoun)],
                "referent": referent.head,
                "distractor": distractor.head,
                "pronoun_offset": offsets["P"],
                "referent_offset": offsets[slot_of[id(referent)]],
                "distractor_offset": offsets[slot_of[id(distractor)]],
            }
            if lower:
                record = {k: v.lower() if isinstance(v, str) else v for k, v in record.items()}
            group.append(record)
    return group


def _pair(lexicon: Lexicon, rng: random.Random, noun_share: float) -> tuple[Person, Person]:
    """A (woman, man) pair: two names, or with probability `noun_share` a name and a person noun."""
    women, men = lexicon.of(FEMALE, "name"), lexicon.of(MALE, "name")
    noun_women, noun_men = lexicon.of(FEMALE, "noun"), lexicon.of(MALE, "noun")
    if (noun_women or noun_men) and rng.random() < noun_share:
        if noun_women and (not noun_men or rng.random() < 0.5):
            return rng.choice(noun_women), rng.choice(men)
        return rng.choice(women), rng.choice(noun_men)
    return rng.choice(women), rng.choice(men)


def generate(
    lexicon: Lexicon,
    families: Sequence[str],
    n_groups: int,
    seed: int,
    corpus: str | None = None,
    noun_share: float = 0.2,
    max_people: int = 12,
    lead_in: bool = True,
) -> Generated:
    """`n_groups` groups of four probes over the frames of `families`, each group a
    (frame, woman, man) triple not drawn twice. With `corpus`, groups whose text
    occurs in it are dropped and replaced. `lead_in`: start each group with one of LEAD_INS."""
    lex = Lexicon(
        [p for g in (FEMALE, MALE) for kind in ("name", "noun") for p in lexicon.of(g, kind)[:max_people]],
        lexicon.lower_case,
    )
    if not lex.of(FEMALE, "name") or not lex.of(MALE, "name"):
        raise UserError(
            "the corpus gave no clear female and male names; lower --min_count or --min_evidence, "
            "or use a larger corpus"
        )
    frames = [(family, i, frame) for family in families for i, frame in enumerate(FAMILIES[family])]
    if not frames:
        raise UsageError("no frames: name at least one family")
    rng = random.Random(seed)
    check = SeenCheck(corpus) if corpus is not None else None
    used: set[tuple] = set()
    probes, meta = [], []
    dropped = 0
    attempts = 0
    # Frames in turn, so every frame is used about equally; people drawn at random.
    order = list(range(len(frames)))
    rng.shuffle(order)
    while len(probes) < 4 * n_groups:
        attempts += 1
        if attempts > 50 * n_groups + 1000:
            raise UserError(
                f"could only make {len(probes) // 4} of {n_groups} unseen probe groups; "
                f"ask for fewer, or allow more people (--max_people)"
            )
        family, index, frame = frames[order[(attempts - 1) % len(order)]]
        woman, man = _pair(lex, rng, noun_share)
        key = (family, index, woman.word, man.word)
        if key in used:
            continue
        used.add(key)
        lead = rng.choice(LEAD_INS) if lead_in else ""
        group = make_group(frame, woman, man, lex.lower_case, lead)
        if check is not None and any(check.seen(s) for r in group for s in probe_stretches(r)):
            dropped += 1
            continue
        number = len(probes) // 4
        for order_index, record in enumerate(group):
            probes.append(record)
            meta.append(
                {
                    "family": family,
                    "frame": index,
                    "group": number,
                    "variant": order_index,
                    "referent_gender": FEMALE if record["pronoun"].lower() == "she" else MALE,
                    "referent_first": record["referent_offset"] < record["distractor_offset"],
                    "lead": lead,
                }
            )
    return Generated(probes, meta, dropped)


def agreement_items(
    lexicon: Lexicon,
    seed: int,
    per_frame: int = 6,
    max_people: int = 12,
    corpus: str | None = None,
    lead_in: bool = True,
) -> list[dict]:
    """Single-person contexts: {"text", "pronoun" (the right next word), "wrong", "person", "gender",
    "kind", "mention", "frame"}. Each frame is filled with `per_frame` women and as many men."""
    rng = random.Random(seed)
    check = SeenCheck(corpus) if corpus is not None else None
    items = []
    for mention, frames in AGREEMENT_FRAMES.items():
        for index, frame in enumerate(frames):
            for gender in (FEMALE, MALE):
                pool = lexicon.of(gender, "name")[:max_people] + lexicon.of(gender, "noun")[: max_people // 2]
                chosen = rng.sample(pool, min(per_frame, len(pool)))
                for person in chosen:
                    pronoun = PRONOUN[gender]
                    body = _fill(frame, person, None, pronoun)
                    text = f"{rng.choice(LEAD_INS)} {body}" if lead_in else body
                    # The next word starts a sentence after ".", so it is capitalised there.
                    starts_sentence = text.rstrip().endswith((".", "!", "?"))
                    right = pronoun.capitalize() if starts_sentence else pronoun
                    wrong = PRONOUN[MALE if gender == FEMALE else FEMALE]
                    wrong = wrong.capitalize() if starts_sentence else wrong
                    item = {
                        "text": text,
                        "pronoun": right,
                        "wrong": wrong,
                        "person": person.head,
                        "gender": gender,
                        "kind": person.kind,
                        "mention": mention,
                        "frame": index,
                    }
                    if lexicon.lower_case:
                        item = {
                            k: v.lower() if k in ("text", "pronoun", "wrong", "person") else v for k, v in item.items()
                        }
                    if check is not None and check.seen(body + " " + item["pronoun"]):
                        continue
                    items.append(item)
    return items


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    _write(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror or exc}); choose a writable path") from None


def keep_encodable(generated: Generated, corpus: str) -> tuple[Generated, int]:
    """Drops groups with a token the corpus's compacted GPT-2 vocabulary lacks (whole groups, for balance)."""
    from data.tokenizer import GPT2Tokenizer, TokenizerError

    tokenizer = GPT2Tokenizer.from_text(corpus)
    bad_groups = set()
    for record, info in zip(generated.probes, generated.meta, strict=True):
        try:
            tokenizer.encode(record["text"])
        except TokenizerError:
            bad_groups.add(info["group"])
    pairs = [(r, m) for r, m in zip(generated.probes, generated.meta, strict=True) if m["group"] not in bad_groups]
    return Generated([r for r, _ in pairs], [m for _, m in pairs], generated.dropped_seen), len(bad_groups)


def write_meta(path: Path, meta: dict) -> None:
    """The settings, the people found and one line per probe (family, frame, group, ...)."""
    head = {k: v for k, v in meta.items() if k not in ("people", "probes")}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    for key in ("people", "probes"):
        rows = [json.dumps(row) for row in meta[key]]
        lines.append(f" {json.dumps(key)}: [")
        lines += [f"  {row}," for row in rows[:-1]] + ([f"  {rows[-1]}"] if rows else [])
        lines.append(" ]," if key == "people" else " ]")
    lines.append("}")
    _write(path, "\n".join(lines) + "\n")


# --- command line ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.gender_probes",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--corpus", required=True, help="training text the people come from (and that must not contain the probes)"
    )
    p.add_argument("--out", required=True, help="main probe file (JSONL, the format data.probes.load_jsonl reads)")
    p.add_argument("--heldout", default=None, help="probe file for the held-out family")
    p.add_argument("--agreement", default=None, help="single-person agreement contexts (JSONL)")
    p.add_argument("--heldout_family", default=HELDOUT_FAMILY, choices=sorted(FAMILIES))
    p.add_argument("--groups", type=int, default=100, help="groups of four probes in the main file")
    p.add_argument("--heldout_groups", type=int, default=40, help="groups of four probes in the held-out file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min_count", type=int, default=20, help="least occurrences of a person word")
    p.add_argument("--min_evidence", type=int, default=10, help="least she/he counts behind a gender")
    p.add_argument("--min_share", type=float, default=0.8, help="least share of the winning pronoun")
    p.add_argument("--max_people", type=int, default=12, help="most frequent names (and nouns) per gender used")
    p.add_argument("--noun_share", type=float, default=0.2, help="share of groups pairing a name with a noun")
    p.add_argument(
        "--no_vocab_check",
        action="store_true",
        help="keep probes even if a token is missing from the corpus's GPT-2 vocabulary",
    )
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from data.prepare import read_data_file

    corpus = read_data_file(args.corpus)
    lexicon = find_people(corpus, min_count=args.min_count, min_evidence=args.min_evidence, min_share=args.min_share)
    print(
        f"{args.corpus}: {'lower case' if lexicon.lower_case else 'capitalised'}; "
        f"{len(lexicon.people)} people with a clear gender",
        file=sys.stderr,
    )
    for gender in (FEMALE, MALE):
        shown = ", ".join(f"{p.surface} ({p.count}, she {p.she}/he {p.he})" for p in lexicon.of(gender)[:16])
        print(f"  {gender}: {shown}", file=sys.stderr)
    main_families = [f for f in FAMILIES if f != args.heldout_family]
    outputs = [(Path(args.out), main_families, args.groups, args.seed)]
    if args.heldout:
        outputs.append((Path(args.heldout), [args.heldout_family], args.heldout_groups, args.seed + 1))
    for path, families, groups, seed in outputs:
        generated = generate(
            lexicon, families, groups, seed, corpus=corpus, noun_share=args.noun_share, max_people=args.max_people
        )
        bad = 0
        if not args.no_vocab_check:
            generated, bad = keep_encodable(generated, corpus)
        write_jsonl(path, generated.probes)
        meta = {
            "corpus": Path(args.corpus).name,
            "families": families,
            "seed": seed,
            "groups": groups,
            "dropped_seen_in_corpus": generated.dropped_seen,
            "dropped_out_of_vocabulary": bad,
            "lower_case": lexicon.lower_case,
            "people": [asdict(p) for p in lexicon.people],
            "probes": generated.meta,
        }
        write_meta(path.with_suffix(".meta.json"), meta)
        print(
            f"wrote {len(generated.probes)} probes ({', '.join(families)}) to {path}; dropped "
            f"{generated.dropped_seen} groups seen in the corpus, {bad} with unknown tokens",
            file=sys.stderr,
        )
    if args.agreement:
        items = agreement_items(lexicon, args.seed, max_people=args.max_people, corpus=corpus)
        write_jsonl(Path(args.agreement), items)
        print(f"wrote {len(items)} agreement contexts to {args.agreement}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, sys.argv[1:]))
