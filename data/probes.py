"""Pronoun probes: a sentence, its pronoun, the noun it refers to and a distractor noun,
aligned to token positions for any tokenizer.

A probe file is JSONL, one object a line:

    {"text": "Lily saw a big dog and she smiled .", "pronoun": "she", "referent": "Lily",
     "distractor": "dog"}

Optional fields: `pronoun_offset`, `referent_offset`, `distractor_offset`
(character offsets into text, for words that occur more than once) and
`continuations` / `distractor_continuations` (first words that could follow
the pronoun when it means the referent / the distractor).

Alignment turns words into positions: attention from the pronoun is read at
its last sub-token (the first place the whole word has been seen), and
attention to a noun sums over every sub-token that overlaps it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from data.tokenizer import Tokenizer
from errors import UserError

REQUIRED_FIELDS = ("text", "pronoun", "referent", "distractor")
OFFSET_FIELDS = ("pronoun_offset", "referent_offset", "distractor_offset")
LIST_FIELDS = ("continuations", "distractor_continuations")
FIELDS = REQUIRED_FIELDS + OFFSET_FIELDS + LIST_FIELDS

Span = tuple[int, int]


def _word_spans(text: str, word: str) -> list[Span]:
    """Whole-word, case-insensitive occurrences of `word` in `text`."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)
    return [m.span() for m in pattern.finditer(text)]


@dataclass
class Probe:
    """One probe. Offsets left out are found in the text when the probe is made."""

    text: str
    pronoun: str
    referent: str
    distractor: str
    pronoun_offset: int | None = None
    referent_offset: int | None = None
    distractor_offset: int | None = None
    continuations: list[str] | None = None
    distractor_continuations: list[str] | None = None
    line: int | None = field(default=None, compare=False)  # where a probe file holds it, for messages

    def __post_init__(self) -> None:
        for name in REQUIRED_FIELDS:
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise UserError(f"field {name!r} must be a non-empty string")
        for name in LIST_FIELDS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, list)
                                      or not all(isinstance(w, str) and w.strip() for w in value)):
                raise UserError(f"{name} must be a list of non-empty words, got {value!r}")
        self.referent_offset = self._place("referent", self.referent_offset, after=0)
        referent_span = (self.referent_offset, self.referent_offset + len(self.referent))
        self.distractor_offset = self._place("distractor", self.distractor_offset, after=0, avoid=referent_span)
        nouns_end = max(referent_span[1], self.distractor_offset + len(self.distractor))
        self.pronoun_offset = self._place("pronoun", self.pronoun_offset, after=nouns_end)
        spans = {name: self.span(name) for name in ("pronoun", "referent", "distractor")}
        for a, b in (("pronoun", "referent"), ("pronoun", "distractor"), ("referent", "distractor")):
            if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]:
                raise UserError(f"the {a} {getattr(self, a)!r} and the {b} {getattr(self, b)!r} are the same place "
                                f"in the text; they must be different words (give {a}_offset or {b}_offset when "
                                f"a word occurs twice)")

    def _place(self, name: str, offset: int | None, after: int, avoid: Span | None = None) -> int:
        word: str = getattr(self, name)
        if offset is not None:
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise UserError(f"{name}_offset must be an integer, got {offset!r}")
            found = self.text[offset:offset + len(word)] if offset >= 0 else ""
            if found.lower() != word.lower():
                raise UserError(f"{name}_offset {offset} points at {found!r}, not {word!r}; "
                                f"give the character offset where {word!r} starts in the text")
            return offset
        every = _word_spans(self.text, word)
        spans = [s for s in every if avoid is None or s != avoid]
        if every and not spans:
            raise UserError(f"{name} {word!r} is the same word as the referent, and occurs only once in the text "
                            f"{self.text!r}; name a different noun as the {name}, or repeat the word in the text")
        if not spans:
            raise UserError(f"{name} {word!r} does not occur as a whole word in the text {self.text!r}; "
                            f"fix the word or the text")
        if name == "pronoun":
            # The pronoun follows its candidates; "it" before them is another use of the word.
            later = [s for s in spans if s[0] >= after]
            return later[0][0] if later else spans[-1][0]
        return spans[0][0]

    def span(self, name: str) -> Span:
        """Character span (start, end) of "pronoun", "referent" or "distractor"."""
        start = getattr(self, f"{name}_offset")
        return start, start + len(getattr(self, name))


def _probe_from_dict(obj: object) -> Probe:
    if not isinstance(obj, dict):
        raise UserError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        # A misspelt optional field would otherwise be silently ignored.
        raise UserError(f"unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(FIELDS)}")
    missing = [name for name in REQUIRED_FIELDS if name not in obj]
    if missing:
        raise UserError(f"missing field(s) {', '.join(map(repr, missing))}; "
                        f"every probe needs {', '.join(REQUIRED_FIELDS)}")
    return Probe(**obj)


def load_probes(path: str | Path) -> list[Probe]:
    """Probes from a JSONL file; blank lines are skipped. Problems raise UserError naming the line."""
    if Path(path).exists() and not Path(path).is_file():  # a FIFO would block, a folder is not a file
        raise UserError(f"probe file {path} is not a regular file; give the path of a JSONL file")
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()  # a byte-order mark is not a probe
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read probe file {path}: {exc}; check the path and that it is UTF-8 JSONL") from None
    probes = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} line {number}: not valid JSON ({exc.msg} at column {exc.colno}); "
                            f"write one JSON object per line") from None
        try:
            probe = _probe_from_dict(obj)
        except UserError as exc:
            raise UserError(f"{path} line {number}: {exc}") from None
        probe.line = number
        probes.append(probe)
    if not probes:
        raise UserError(f"{path} holds no probes; write one JSON object per line")
    return probes


@dataclass
class AlignedProbe:
    """A probe in token positions.

    pronoun_pos is the query row; referent/distractor_positions are the key
    columns whose attention sums to the attention paid to each noun.
    continuation_pos is the position whose next-token prediction is the word
    after the pronoun (None when there is nothing to score there).
    """

    probe: Probe
    ids: list[int]
    tokens: list[str]
    pronoun_pos: int
    referent_positions: list[int]
    distractor_positions: list[int]
    continuation_pos: int | None = None
    continuation_ids: list[int] = field(default_factory=list)
    distractor_continuation_ids: list[int] = field(default_factory=list)


def _overlapping(spans: Sequence[Span], target: Span) -> list[int]:
    start, end = target
    return [i for i, (s, e) in enumerate(spans) if s < end and e > start]


def _next_word(text: str, pos: int) -> tuple[str, str] | None:
    """(whitespace, word) right after `pos`, or None at the end of the text."""
    match = re.compile(r"(\s*)(\S+)").match(text, pos)
    return (match.group(1), match.group(2)) if match else None


def _first_token_ids(tokenizer: Tokenizer, ids: list[int], prefix: str, words: Sequence[tuple[str, str]]
                     ) -> tuple[int | None, list[int]]:
    """For each (separator, word): the first token of `word` when it follows `prefix + separator`.

    Returns the position that predicts it and the deduplicated token ids. The
    position is None when the text's own tokens differ from the prefix's before
    that point, so the model would not be predicting from the same context.
    """
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
            raise UserError(f"continuation {word!r} tokenizes the context before it differently from the "
                            f"other continuations; use words that start with a letter")
        position = index - 1
        if cand_ids[index] not in first_ids:
            first_ids.append(cand_ids[index])
    return position, first_ids


def align(probe: Probe, tokenizer: Tokenizer) -> AlignedProbe:
    """Token positions of the probe's words; text the tokenizer cannot encode raises its TokenizerError."""
    ids, spans = tokenizer.encode_with_offsets(probe.text)
    pronoun_tokens = _overlapping(spans, probe.span("pronoun"))
    referent_positions = _overlapping(spans, probe.span("referent"))
    distractor_positions = _overlapping(spans, probe.span("distractor"))
    if not (pronoun_tokens and referent_positions and distractor_positions):
        raise UserError(f"probe {probe.text!r}: a word covers no token; check the offsets")

    pronoun_end = probe.span("pronoun")[1]
    prefix = probe.text[:pronoun_end]
    if probe.continuations:
        words = [(" ", w) for w in probe.continuations]
        distractor_words = [(" ", w) for w in probe.distractor_continuations or []]
    else:
        following = _next_word(probe.text, pronoun_end)
        words = [following] if following else []
        distractor_words = []
    continuation_pos, continuation_ids = _first_token_ids(tokenizer, ids, prefix, words)
    _, distractor_ids = _first_token_ids(tokenizer, ids, prefix, distractor_words)
    if continuation_pos is None:
        distractor_ids = []

    return AlignedProbe(probe=probe, ids=ids, tokens=tokenizer.token_strings(ids),
                        pronoun_pos=pronoun_tokens[-1], referent_positions=referent_positions,
                        distractor_positions=distractor_positions, continuation_pos=continuation_pos,
                        continuation_ids=continuation_ids, distractor_continuation_ids=distractor_ids)


def align_all(probes: Sequence[Probe], tokenizer: Tokenizer) -> list[AlignedProbe]:
    return [align(probe, tokenizer) for probe in probes]
