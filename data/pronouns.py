"""A generated corpus where predicting the word after a pronoun needs its referent.

Every line has two candidate nouns and one pronoun that fits exactly one of them, e.g. "one day ,
the big dog fetched the red ball and she barked loudly ." Each noun owns a few continuations whose
first words no other noun uses, so the word after the pronoun names the referent: a model that
predicts it well must carry the referent's identity to the pronoun, which is what an attention head
from pronoun to noun can do.

Positional shortcuts are closed off: the referent is the first noun exactly as often as the second
(so "first noun" and "nearest noun" both score 50%), and openers and 0-2 adjectives per noun move
every word. A fixed set of noun pairs never meets in training; `probe_records` draws only from those.
"""

from __future__ import annotations

import random

EXPLANATION_SENTENCE = "The dog fetched the ball and she was happy"
PROBES = 256  # probe sentences of the corpus (prepared beside it as probes.jsonl)

# noun -> (pronoun, continuations). Gender is fixed so that two people of different genders are never ambiguous.
PEOPLE: dict[str, tuple[str, list[str]]] = {
    "king": ("he", ["ruled the land", "laughed loudly"]),
    "prince": ("he", ["bowed low", "rode away"]),
    "boy": ("he", ["kicked hard", "shouted with joy"]),
    "man": ("he", ["worked late", "shrugged"]),
    "father": ("he", ["cooked dinner", "fixed the roof"]),
    "brother": ("he", ["grinned", "raced away"]),
    "uncle": ("he", ["told a joke", "nodded"]),
    "son": ("he", ["studied hard", "cheered"]),
    "wizard": ("he", ["cast a spell", "vanished"]),
    "queen": ("she", ["waved", "smiled warmly"]),
    "princess": ("she", ["danced", "dressed up"]),
    "girl": ("she", ["giggled", "skipped away"]),
    "woman": ("she", ["painted", "read quietly"]),
    "mother": ("she", ["baked bread", "sighed softly"]),
    "sister": ("she", ["whispered", "frowned"]),
    "aunt": ("she", ["poured tea", "waited"]),
    "daughter": ("she", ["wrote a letter", "listened"]),
    "witch": ("she", ["stirred the pot", "screamed"]),
}

# Animals take "he" or "she", drawn per sentence, so they only pair with objects.
ANIMALS: dict[str, list[str]] = {
    "dog": ["barked loudly", "wagged happily", "dug a hole"],
    "cat": ["purred softly", "scratched"],
    "horse": ["galloped away", "neighed"],
    "cow": ["mooed", "chewed grass"],
    "pig": ["oinked", "wallowed in the mud"],
    "duck": ["quacked", "dove under"],
    "bird": ["sang sweetly", "tweeted"],
    "fox": ["hid", "sneaked away"],
    "bear": ["climbed up high", "grunted"],
    "rabbit": ["hopped away", "nibbled a carrot"],
    "frog": ["jumped", "croaked"],
    "mouse": ["squeaked", "scurried away"],
    "sheep": ["bleated", "grazed"],
    "goat": ["butted", "ate"],
    "wolf": ["howled", "prowled"],
    "lion": ["roared", "hunted"],
    "owl": ["hooted", "blinked"],
}

OBJECTS: dict[str, list[str]] = {
    "ball": ["rolled away", "bounced"],
    "box": ["opened", "rattled"],
    "kite": ["flew high", "soared"],
    "boat": ["sailed away", "floated"],
    "car": ["honked", "sped away"],
    "cup": ["spilled", "tipped over"],
    "hat": ["blew away", "drifted"],
    "drum": ["boomed", "banged"],
    "bell": ["rang", "chimed"],
    "clock": ["ticked", "stopped"],
    "lamp": ["shone", "flickered"],
    "book": ["tore", "flipped open"],
    "door": ["creaked", "swung open", "slammed shut"],
    "stone": ["sank", "cracked"],
    "apple": ["fell", "ripened"],
    "cake": ["smelled good", "tasted sweet"],
    "train": ["whistled", "chugged"],
    "candle": ["burned", "melted"],
}

# Verbs an animate subject can use with any second noun.
VERBS_ANIMATE = [
    "saw",
    "found",
    "liked",
    "watched",
    "fetched",
    "followed",
    "noticed",
    "chased",
    "pushed",
    "carried",
    "held",
    "wanted",
]
# Verbs that also suit an object as subject, so objects can come first.
VERBS_ANY = ["hit", "touched", "was near", "was behind", "was next to", "lay beside"]
# Two adjectives go opinion before size, as English orders them ("nice old").
OPINION_ADJECTIVES = ["nice", "pretty", "strange", "lovely"]
SIZE_ADJECTIVES = ["big", "small", "little", "old"]
OPENERS = ["", "one day ,", "in the morning ,", "then", "later ,"]
# Generic endings after the specific continuation; "was happy" puts the explanation sentence's words into
# the corpus without weakening the cue.
TAILS = ["and was happy", "and was tired", "again", "all day"]
TAIL_RATE = 0.3

HELD_OUT_FRACTION = 0.12
KEEP_IN_TRAINING = frozenset({"dog", "ball"})  # the explanation's own pair

CONTINUATIONS: dict[str, list[str]] = {**{noun: conts for noun, (_, conts) in PEOPLE.items()}, **ANIMALS, **OBJECTS}
# The pronouns that may refer to each noun.
PRONOUNS_OF: dict[str, tuple[str, ...]] = {
    **{noun: (pronoun,) for noun, (pronoun, _) in PEOPLE.items()},
    **dict.fromkeys(ANIMALS, ("he", "she")),
    **dict.fromkeys(OBJECTS, ("it",)),
}


def first_words(noun: str) -> list[str]:
    """First word of each continuation of `noun`: the word that gives the referent away."""
    return [c.split()[0] for c in CONTINUATIONS[noun]]


def _valid_pairs() -> dict[str, list[tuple[str, str]]]:
    """Unordered pairs no pronoun can confuse, by kind; animate noun (or he-person) first."""
    men = [n for n, (p, _) in PEOPLE.items() if p == "he"]
    women = [n for n, (p, _) in PEOPLE.items() if p == "she"]
    return {
        "person-person": [(m, w) for m in men for w in women],
        "person-object": [(p, o) for p in PEOPLE for o in OBJECTS],
        "animal-object": [(a, o) for a in ANIMALS for o in OBJECTS],
    }


def _held_out() -> frozenset[frozenset[str]]:
    # A fixed seed, independent of the corpus seed, so every corpus and probe set agree on the unseen pairs.
    rng = random.Random("pronoun-corpus held-out pairs")
    chosen: set[frozenset[str]] = set()
    for pairs in _valid_pairs().values():
        candidates = [p for p in pairs if frozenset(p) != KEEP_IN_TRAINING]
        chosen.update(frozenset(p) for p in rng.sample(candidates, round(HELD_OUT_FRACTION * len(pairs))))
    return frozenset(chosen)


HELD_OUT_PAIRS = _held_out()


def _balanced_flags(rng: random.Random, n: int) -> list[bool]:
    """n booleans, half True (one more False when n is odd), shuffled."""
    flags = [True] * (n // 2) + [False] * (n - n // 2)
    rng.shuffle(flags)
    return flags


def _noun_phrase(rng: random.Random, noun: str, article: str) -> str:
    count = rng.randint(0, 2)
    if count == 2:
        adjectives = [rng.choice(OPINION_ADJECTIVES), rng.choice(SIZE_ADJECTIVES)]
    else:
        adjectives = [rng.choice(OPINION_ADJECTIVES + SIZE_ADJECTIVES)] * count
    return " ".join([article, *adjectives, noun])


def _sentence(
    rng: random.Random, pair: tuple[str, str], pair_order: bool, referent_first: bool, tail: str
) -> tuple[str, dict]:
    """One line and its probe record. pair_order keeps `pair` as given; otherwise swapped."""
    first, second = pair if pair_order else pair[::-1]
    referent, distractor = (first, second) if referent_first else (second, first)
    pronoun = rng.choice(PRONOUNS_OF[referent])
    verb = rng.choice(VERBS_ANY if first in OBJECTS else VERBS_ANIMATE + VERBS_ANY)
    opener = rng.choice(OPENERS)
    continuation = rng.choice(CONTINUATIONS[referent])
    words = [
        opener,
        _noun_phrase(rng, first, "the" if opener else "The"),
        verb,
        _noun_phrase(rng, second, "the"),
        "and",
        pronoun,
        continuation,
    ]
    core = " ".join(w for w in words if w)
    line = f"{core} {tail} ." if tail else f"{core} ."
    record = {
        "text": f"{core} .",
        "pronoun": pronoun,
        "referent": referent,
        "distractor": distractor,
        "continuations": first_words(referent),
        "distractor_continuations": first_words(distractor),
    }
    return line, record


def _generate(rng: random.Random, n: int, held_out: bool, with_tails: bool) -> list[tuple[str, dict]]:
    pairs = {
        kind: [p for p in kind_pairs if (frozenset(p) in HELD_OUT_PAIRS) == held_out]
        for kind, kind_pairs in _valid_pairs().items()
    }
    referent_first = _balanced_flags(rng, n)
    pair_order = _balanced_flags(rng, n)
    out = []
    for i in range(n):
        pair = rng.choice(pairs[rng.choice(list(pairs))])
        tail = rng.choice(TAILS) if with_tails and rng.random() < TAIL_RATE else ""
        out.append(_sentence(rng, pair, pair_order[i], referent_first[i], tail))
    return out


def training_text(seed: int = 1234, n_sentences: int = 30000) -> str:
    """The training corpus: one sentence a line, no held-out pair; the same text for the same seed."""
    rng = random.Random(f"pronoun-corpus train {seed}")
    return "".join(line + "\n" for line, _ in _generate(rng, n_sentences, held_out=False, with_tails=True))


def probe_records(seed: int = 1234) -> list[dict]:
    """PROBES probes over held-out pairs only, the referent first in exactly half of them."""
    rng = random.Random(f"pronoun-corpus probes {seed}")
    return [record for _, record in _generate(rng, PROBES, held_out=True, with_tails=False)]
