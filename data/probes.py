"""Pronoun probes: a sentence, its pronoun, the noun it refers to and a distractor noun (`Probe`), and
agreement contexts that name one person and stop just before a pronoun (`AgreementProbe`), read from JSONL
files (one object a line holding the dataclass's fields; docs/inspect.md) and aligned to token positions for
any tokenizer.

Alignment turns words into positions: attention from the pronoun is read at its last sub-token (the
first place the whole word has been seen), and attention to a noun sums over every sub-token that
overlaps it. An agreement context is scored by next-token probabilities (`AgreementProbe`).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import UserError
from common.files import read_text
from common.parsing import NotParsed, parse_json
from data.tokenizer import Tokenizer

Span = tuple[int, int]


def _word_spans(text: str, name: str, word: str) -> list[Span]:
    """Whole-word, case-insensitive occurrences of `word` (the record's `name`) in `text`; a UserError when none."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)
    spans = [m.span() for m in pattern.finditer(text)]
    if not spans:
        raise UserError(
            f"{name} {word!r} does not occur as a whole word in the text {text!r}; fix the word or the text"
        )
    return spans


# What a record's field may hold, by its annotation: (whether a value is one, in words). A word is never blank; a
# word left out is None, and an answer may be a space.
_FIELD_RULES = {
    "str": (lambda v: isinstance(v, str) and v.strip(), "a non-empty string"),
    "str | None": (lambda v: v is None or isinstance(v, str) and v != "", "a non-empty string"),
    "int | None": (lambda v: v is None or type(v) is int, "an integer"),
    "list[str] | None": (
        lambda v: v is None or isinstance(v, list) and all(isinstance(w, str) and w.strip() for w in v),
        "a list of non-empty words",
    ),
}


def _check_fields(record: object) -> None:
    """A UserError for the first field of `record` (a dataclass read from a file) that its annotation refuses."""
    for each in dataclasses.fields(record):
        good, words = _FIELD_RULES[each.type]
        if not good(getattr(record, each.name)):
            raise UserError(f"field {each.name!r} must be {words}, got {getattr(record, each.name)!r}")


@dataclass
class Probe:
    """One probe. Offsets left out are found in the text when the probe is made."""

    what = "probe"  # in messages: "probe file", "holds no probes"
    text: str
    pronoun: str
    referent: str
    distractor: str
    pronoun_offset: int | None = None  # character offsets into text, for words that occur more than once
    referent_offset: int | None = None
    distractor_offset: int | None = None
    continuations: list[str] | None = None  # first words that could follow the pronoun meaning the referent
    distractor_continuations: list[str] | None = None  # ... meaning the distractor
    line: int | None = field(default=None, compare=False)  # where a probe file holds it, for messages

    def __post_init__(self) -> None:
        _check_fields(self)
        self.referent_offset = self._place("referent")
        self.distractor_offset = self._place("distractor", avoid=self.span("referent"))
        nouns_end = max(self.span("referent")[1], self.span("distractor")[1])
        self.pronoun_offset = self._place("pronoun", after=nouns_end)
        spans = {name: self.span(name) for name in ("pronoun", "referent", "distractor")}
        for a, b in (("pronoun", "referent"), ("pronoun", "distractor"), ("referent", "distractor")):
            if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]:
                raise UserError(
                    f"the {a} {getattr(self, a)!r} and the {b} {getattr(self, b)!r} are the same place "
                    f"in the text; they must be different words (give {a}_offset or {b}_offset when "
                    f"a word occurs twice)"
                )

    def _place(self, name: str, after: int = 0, avoid: Span | None = None) -> int:
        word, offset = getattr(self, name), getattr(self, f"{name}_offset")
        if offset is not None:
            found = self.text[offset : offset + len(word)] if offset >= 0 else ""
            if found.lower() != word.lower():
                raise UserError(
                    f"{name}_offset {offset} points at {found!r}, not {word!r}; "
                    f"give the character offset where {word!r} starts in the text"
                )
            return offset
        spans = [s for s in _word_spans(self.text, name, word) if avoid is None or s != avoid]
        if not spans:
            raise UserError(
                f"{name} {word!r} is the same word as the referent, and occurs only once in the text "
                f"{self.text!r}; name a different noun as the {name}, or repeat the word in the text"
            )
        if name == "pronoun":
            # The pronoun follows its candidates; "it" before them is another use of the word.
            later = [s for s in spans if s[0] >= after]
            return later[0][0] if later else spans[-1][0]
        return spans[0][0]

    def span(self, name: str) -> Span:
        """Character span (start, end) of "pronoun", "referent" or "distractor"."""
        start = getattr(self, f"{name}_offset")
        return start, start + len(getattr(self, name))

    def align(self, tokenizer: Tokenizer) -> AlignedProbe:
        """Token positions of the probe's words; text the tokenizer cannot encode raises its TokenizerError."""
        ids, spans = tokenizer.encode_with_offsets(self.text)
        pronoun_tokens, referent_positions, distractor_positions = (
            _overlapping(spans, self.span(name)) for name in ("pronoun", "referent", "distractor")
        )
        if not (pronoun_tokens and referent_positions and distractor_positions):
            raise UserError(f"probe {self.text!r}: a word covers no token; check the offsets")

        pronoun_end = self.span("pronoun")[1]
        prefix = self.text[:pronoun_end]
        if self.continuations:
            words = [(" ", w) for w in self.continuations]
            distractor_words = [(" ", w) for w in self.distractor_continuations or []]
        else:
            following = re.compile(r"(\s*)(\S+)").match(self.text, pronoun_end)  # (whitespace, word)
            words = [following.groups()] if following else []
            distractor_words = []
        continuation_pos, continuation_ids = _first_token_ids(tokenizer, ids, prefix, words)
        _, distractor_ids = _first_token_ids(tokenizer, ids, prefix, distractor_words)
        # A first token both nouns' continuations begin with (a char model's "barked" and "bounced": b) tells
        # neither apart: it counts for neither, and a probe left without one of its own is not measured on them.
        shared = set(continuation_ids) & set(distractor_ids)
        continuation_ids = [t for t in continuation_ids if t not in shared]
        distractor_ids = [t for t in distractor_ids if t not in shared]
        indistinct = continuation_pos is not None and not continuation_ids
        if continuation_pos is None or not continuation_ids:
            continuation_pos, continuation_ids, distractor_ids = None, [], []

        return AlignedProbe(
            probe=self,
            ids=ids,
            tokens=tokenizer.token_strings(ids),
            pronoun_pos=pronoun_tokens[-1],
            referent_positions=referent_positions,
            distractor_positions=distractor_positions,
            continuation_pos=continuation_pos,
            continuation_ids=continuation_ids,
            distractor_continuation_ids=distractor_ids,
            indistinct=indistinct,
        )


@dataclass
class AgreementProbe:
    """A context naming one person, cut just before a pronoun ("Lily went to the park and"). The
    model agrees when it gives `pronoun` ("she") more probability than `wrong` ("he") as the next
    word. `person` (found as a whole word) lets each head's weight on the name be read; `mention`
    is "first" when nothing has referred back to the person yet, "second" when a pronoun has."""

    what = "agreement context"
    text: str
    pronoun: str  # the pronoun that agrees: the right next word
    wrong: str  # the other one
    person: str | None = None
    mention: str | None = None  # "first" or "second"
    gender: str | None = None  # the person's, as the corpus gives it
    kind: str | None = None  # "name" or "noun"
    frame: int | None = None  # which sentence frame made it
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check_fields(self)
        if self.pronoun.strip().lower() == self.wrong.strip().lower():
            raise UserError(
                f"'pronoun' and 'wrong' are both {self.pronoun!r}; 'wrong' is the pronoun that does not agree"
            )
        if self.person is not None:
            _word_spans(self.text, "person", self.person)

    def align(self, tokenizer: Tokenizer) -> AlignedAgreement:
        """Token positions of an agreement context; text the tokenizer cannot encode raises its TokenizerError."""
        ids, spans = tokenizer.encode_with_offsets(self.text + " " + self.pronoun)
        position, right = _first_token_ids(tokenizer, ids, self.text, [(" ", self.pronoun)])
        wrong_position, wrong = _first_token_ids(tokenizer, ids, self.text, [(" ", self.wrong)])
        if position is None or wrong_position != position or right == wrong:
            raise UserError(
                f"agreement context {self.text!r}: {self.pronoun!r} and {self.wrong!r} do not start "
                f"with different tokens after the same context; end the text before the pronoun"
            )
        person = _overlapping(spans, _word_spans(self.text, "person", self.person)[0]) if self.person else []
        return AlignedAgreement(self, ids[: position + 1], position, right[0], wrong[0], person)


MAX_RECORDS = 10_000  # records a probe file may hold: the generated corpora's hold 256, the largest shipped 400


@dataclass
class PatchPair:
    """A clean and a corrupted prompt for activation patching (watch/measure/patching.py), which must encode to as
    many tokens, and, optionally, the right and the wrong answer, each one token (by default the greedy next tokens
    of the clean and of the corrupted prompt)."""

    what = "pair"
    # Patching a pair runs the model on a row for every head, position and layer (in batches): about a second a pair
    # on a small CPU model, longer on a larger one. So a part to try is a few hundred pairs (minutes); the cap,
    # 10,000, takes hours.
    cost = "; each pair takes about a second on a small CPU model (longer on a larger one), so 10,000 take hours"
    part = 300
    clean: str
    corrupted: str
    answer: str | None = None
    wrong: str | None = None
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check_fields(self)


def load_jsonl(path: str | Path, make: type[Probe] | type[AgreementProbe] | type[PatchPair]) -> list:
    """The `make` records of a JSONL file, one object a line, blank lines skipped; its fields without a default
    are required. Problems raise UserError naming the line."""
    kind = make.what
    fields = [f.name for f in dataclasses.fields(make) if f.name != "line"]
    required = [f.name for f in dataclasses.fields(make) if f.default is dataclasses.MISSING]
    lines = read_text(path, f"{kind} file", "give the path of a JSONL file").splitlines()
    records = sum(1 for line in lines if line.strip())
    if records > MAX_RECORDS:  # reading each costs a tokenization: 100,000 took minutes with nothing to show
        cost, part = getattr(make, "cost", ""), getattr(make, "part", MAX_RECORDS)
        raise UserError(
            f"{path} holds {records:,} {kind}s, more than the {MAX_RECORDS:,} gptwatch reads{cost} (a head's scores "
            f"settle after a few hundred); use a part of it, e.g. head -n {part} {shlex.quote(str(path))} > part.jsonl"
        )
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line)
        except NotParsed as exc:
            raise UserError(f"{path} line {number}: not valid JSON ({exc}); write one JSON object per line") from None
        try:
            if not isinstance(obj, dict):
                raise UserError(f"expected a JSON object, got {type(obj).__name__}")
            unknown = sorted(set(obj) - set(fields))
            if unknown:  # a misspelt optional field would otherwise be silently ignored
                raise UserError(f"unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(fields)}")
            missing = [name for name in required if name not in obj]
            if missing:
                raise UserError(
                    f"missing field(s) {', '.join(map(repr, missing))}; every {kind} needs {', '.join(required)}"
                )
            item = make(**obj)
        except UserError as exc:
            raise UserError(f"{path} line {number}: {exc}") from None
        item.line = number
        items.append(item)
    if not items:
        raise UserError(f"{path} holds no {kind}s; write one JSON object per line")
    return items


@dataclass
class AlignedProbe:
    """A probe in token positions. pronoun_pos is the query row; referent/distractor_positions are the key
    columns whose attention sums to the attention paid to each noun. continuation_pos is the position whose
    next-token prediction is the word after the pronoun (None when there is nothing to score there)."""

    probe: Probe
    ids: list[int]
    tokens: list[str]
    pronoun_pos: int
    referent_positions: list[int]
    distractor_positions: list[int]
    continuation_pos: int | None = None
    continuation_ids: list[int] = field(default_factory=list)
    distractor_continuation_ids: list[int] = field(default_factory=list)
    indistinct: bool = False  # its continuations begin as the other noun's do: none is its own, so none is scored


def _overlapping(spans: Sequence[Span], target: Span) -> list[int]:
    start, end = target
    return [i for i, (s, e) in enumerate(spans) if s < end and e > start]


def _first_token_ids(
    tokenizer: Tokenizer, ids: list[int], prefix: str, words: Sequence[tuple[str, str]]
) -> tuple[int | None, list[int]]:
    """For each (separator, word): the first token of `word` when it follows `prefix + separator`. Returns
    the position that predicts it and the deduplicated token ids. The position is None when the text's own
    tokens differ from the prefix's before that point: the model would not predict from the same context."""
    position: int | None = None
    first_ids: list[int] = []
    for separator, word in words:
        word = word.strip()
        text = prefix + separator + word
        word_start = len(prefix) + len(separator)
        cand_ids, spans = tokenizer.encode_with_offsets(text)
        index = next((i for i, (s, e) in enumerate(spans) if s <= word_start < e), None)
        if not index or cand_ids[:index] != ids[:index]:
            return None, []
        if position is not None and index - 1 != position:
            raise UserError(
                f"continuation {word!r} tokenizes the context before it differently from the "
                f"other continuations; use words that start with a letter"
            )
        position = index - 1
        if cand_ids[index] not in first_ids:
            first_ids.append(cand_ids[index])
    return position, first_ids


@dataclass
class AlignedAgreement:
    """An agreement context in token positions: `ids` runs up to `continuation_pos`, which predicts the
    pronoun, where `right_id` and `wrong_id` are the first tokens of the two pronouns."""

    probe: AgreementProbe
    ids: list[int]
    continuation_pos: int
    right_id: int
    wrong_id: int
    person_positions: list[int]  # tokens of the person's word (empty without `person`)
