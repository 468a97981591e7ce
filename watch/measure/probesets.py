"""What the model is run on to be watched: probe sets, token sequences that go through the model together with what
each is for, each scored from one capture. This module makes them; what each kind is for, and which the watch makes
for a run or a checkpoint, is its record in `watch.measure.reading.PROBE_KINDS`. The kinds: `PRONOUN` probes and
`AGREEMENT` contexts from JSONL files, `REPEATED` random tokens and the `REACH` repeats at shorter distances, `TEXT`
windows of held-out text, and the `SENTENCES` whose heatmaps and attention page a run shows.

Every way of making a probe set checks its sequences against the model's block_size here, once: sequences that
cannot be used (tokens outside the vocabulary, too long) are left out with one warning, or, `strict`, refused in one
line naming the file's line. A pass (`watch.measure.reading.score`) then runs each set through the model once
(`watch/measure/capture.py`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.errors import UserError, warn
from data.corpora import ONE_EXAMPLE_A_LINE
from data.probes import load_jsonl
from data.tokenizer import Tokenizer, TokenizerError
from watch.measure.heads import PRONOUNS

PRONOUN, AGREEMENT, REPEATED, REACH, TEXT, SENTENCES = "pronoun", "agreement", "repeated", "reach", "text", "sentences"
REACH_DISTANCES = (4, 8, 16, 32)

REPEATED_SEQUENCES = 128
REPEATED_MAX_LENGTH = 50
REPEATED_MIN_LENGTH = 16  # L below this (block_size < 32): repeated-token scores are not measurable
NO_TEXT = (
    "no held-out text (give sample.py --text FILE, or keep the run's prepared data): previous-token, sink, "
    "current-token, positional and broad scores and the in-context score are left out"
)
REPEATED_SEED = 0


def draw_seed(draw: int, kind: str) -> int:
    """The seed of the random sequences of `kind` (`REPEATED` or `REACH`) in draw number `draw`: the watch reads
    draw 0 (seeds 0 and 1); other draws say how much another sample would move what it says."""
    return REPEATED_SEED + 2 * draw + (kind == REACH)


def distinct(rows: list[list[int]], key_length: int | None = None) -> list[list[int]]:
    """`rows` in the order drawn, less each that repeats an earlier one (in its first `key_length` tokens, when
    given): a row drawn again is no new draw, and a spread that counted it twice would claim a certainty the draws
    do not have. A periodic text's windows are a few rows, whatever the number of places drawn."""
    seen: set[tuple[int, ...]] = set()
    kept = []
    for row in rows:
        key = tuple(row[:key_length])
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


# The fewest distinct draws (held-out pairs of windows) a figure's spread is read from: over fewer, two standard errors
# understate it, and over two or three windows of a periodic text they are 0.000 by construction.
MIN_DRAWS = 10

# Held-out tokens an evaluation reads: enough that drawing the windows again moves the in-context score by less
# than its spread.
TEXT_TOKENS = 16384
QUICK_TOKENS = 512  # of each generated set, what a pass every watch_interval steps reads


@dataclass
class ProbeSet:
    """Sequences run through the model together. `logits_at` holds, per sequence, the position
    whose next-token logits are read (None: none); `all_logits` reads them at every position."""

    kind: str
    ids: list[list[int]]
    items: list[Any] = field(default_factory=list)  # per sequence: an AlignedProbe, AlignedAgreement, text, or
    #                                                    the (start, distance) of each of its repeats
    logits_at: list[int | None] | None = None
    all_logits: bool = False
    about: str = ""  # how it was made, for reports
    draw_rule: str = ""  # for random tokens, which tokens were drawn (`TokenPool.rule`)
    group: int = 1  # sequences that go through the model together, in one capture (held-out text: pairs)
    # What depends on the sequences alone (padded ids, score targets), made once by the captures and reused by
    # every pass (`watch.measure.capture.constant`): the set never changes, and the watch passes over it every few
    # steps.
    constants: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.ids)

    def cut(self, tokens: int) -> ProbeSet:
        """Its first sequences, as many whole groups as hold `tokens` tokens (one group at least): itself when that is
        all of them."""
        keep = max(self.group, tokens // len(self.ids[0]) // self.group * self.group)
        if keep >= len(self):
            return self
        return replace(
            self,
            ids=self.ids[:keep],
            items=self.items[:keep],
            about=f"{keep} of {self.about}",
            logits_at=self.logits_at[:keep] if self.logits_at is not None else None,
            constants={},
        )


@dataclass
class ProbeSets:
    """The probe sets of a run or a checkpoint by kind, and, for each kind that could not be made,
    why (for reports: "no held-out text: ...")."""

    sets: dict[str, ProbeSet] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, made: ProbeSet | str | None) -> None:
        """`made` is the set, or the reason there is none (None: not asked for)."""
        if isinstance(made, ProbeSet):
            self.sets[kind] = made
        elif made:
            self.missing[kind] = made

    def get(self, kind: str) -> ProbeSet | None:
        return self.sets.get(kind)


# --- probes and agreement contexts from files -------------------------------------------------------


def from_file(
    kind: str, records: type, path: str | Path, tokenizer: Tokenizer, block_size: int, *, strict: bool = False
) -> ProbeSet:
    """The `kind` set of a JSONL file of `records` (`data.probes`: two-person `Probe`s, single-person
    `AgreementProbe`s), in this tokenizer's positions. Those with tokens outside the vocabulary or longer than
    block_size are left out with one warning each kind, or with `strict` refused naming the line."""
    what = f"{records.what}s"
    read = load_jsonl(path, records)
    aligned, unknown, too_long = [], 0, 0
    for record in read:
        try:
            item = record.align(tokenizer)
        except UserError as exc:  # a token outside the vocabulary only leaves the record out, unless `strict`
            if strict or not isinstance(exc, TokenizerError):
                raise UserError(f"{path} line {record.line}: {exc}") from None
            unknown += 1
            continue
        if len(item.ids) > block_size:
            if strict:
                raise UserError(
                    f"{path} line {record.line}: {len(item.ids)} tokens, more than the model's "
                    f"block_size {block_size}; shorten its text, or remove it"
                )
            too_long += 1
            continue
        aligned.append(item)
    if unknown:
        warn(f"{unknown} of {len(read)} {what} in {path} use tokens outside the vocabulary and are left out")
    if too_long:
        warn(f"{too_long} of {len(read)} {what} in {path} are longer than block_size={block_size} and are left out")
    indistinct = sum(getattr(item, "indistinct", False) for item in aligned)
    if indistinct:  # `data.probes.Probe.align` left their continuations out: say so, never score them as 0
        warn(
            f"{indistinct} of {len(read)} {what} in {path} have continuations that begin with the same tokens for "
            f"both nouns, which tell neither apart: their continuations are not measurable and are left out"
        )
    return ProbeSet(
        kind,
        [item.ids for item in aligned],
        aligned,
        logits_at=[item.continuation_pos for item in aligned],
        about=f"{len(aligned)} {what} from {path}",
    )


# --- repeated random tokens and held-out text --------------------------------------------------------


def repeated_length(block_size: int) -> int:
    """L, the length of each random sequence before it repeats."""
    return min(block_size // 2, REPEATED_MAX_LENGTH)


def _drawable(pool: TokenPool | Sequence[int]) -> tuple[torch.Tensor, str]:
    """The distinct tokens of `pool`, sorted, and its rule ("" for a plain list of tokens)."""
    tokens, rule = (pool.tokens, pool.rule) if isinstance(pool, TokenPool) else (pool, "")
    return torch.tensor(sorted(set(tokens)), dtype=torch.long), rule


def repeated_tokens(
    pool: TokenPool | Sequence[int],
    block_size: int,
    *,
    seed: int = REPEATED_SEED,
    sequences: int = REPEATED_SEQUENCES,
) -> ProbeSet | str:
    """`sequences` sequences of L = min(block_size // 2, 50) tokens drawn uniformly (the draw `seed`) from `pool`,
    each followed by itself, no separator; or why there are none (below block_size 32, L < 16)."""
    length = repeated_length(block_size)
    if length < REPEATED_MIN_LENGTH:
        return (
            f"block_size {block_size} is below {2 * REPEATED_MIN_LENGTH}, too short for repeated random tokens "
            f"of {REPEATED_MIN_LENGTH}+{REPEATED_MIN_LENGTH}: induction, duplicate-token and in-context gain "
            f"are not measurable"
        )
    pool, rule = _drawable(pool)
    if len(pool) < 2:
        return "the vocabulary has fewer than 2 tokens to draw repeated random tokens from"
    draws = torch.randint(len(pool), (sequences, length), generator=torch.Generator().manual_seed(seed))
    first = pool[draws]
    ids = distinct(torch.cat([first, first], dim=1).tolist())
    return ProbeSet(
        REPEATED,
        ids,
        all_logits=True,
        about=f"{len(ids)} sequences of {length} random tokens repeated (from {len(pool)} tokens, seed {seed})",
        draw_rule=rule,
    )


def repeats_by_distance(
    pool: TokenPool | Sequence[int],
    block_size: int,
    *,
    seed: int = REPEATED_SEED + 1,
    sequences: int = REPEATED_SEQUENCES,
) -> ProbeSet | None:
    """The `REACH` set: rows of repeats at each distance in `REACH_DISTANCES` below the `REPEATED` set's L
    that fits in `block_size`; None when no distance does (or there is no `REPEATED` set to go with)."""
    length = repeated_length(block_size)
    segments, used = [], 0  # (start, distance) of each repeat in a row
    for distance in (d for d in REACH_DISTANCES if d < length):
        if used + 2 * distance <= block_size:
            segments.append((used, distance))
            used += 2 * distance
    pool, rule = _drawable(pool)
    if length < REPEATED_MIN_LENGTH or len(pool) < 2 or not segments:
        return None
    generator = torch.Generator().manual_seed(seed)
    rows = [[] for _ in range(sequences)]
    distances = [d for _, d in segments]
    for distance in distances:
        draws = pool[torch.randint(len(pool), (sequences, distance), generator=generator)].tolist()
        for row, drawn in zip(rows, draws, strict=True):
            row += drawn + drawn
    # The first repeat's score reads its own tokens alone, so rows that start with the same one are one draw of it (a
    # tiny vocabulary has few); keeping one of them keeps every later repeat, read after it, distinct too.
    rows = distinct(rows, key_length=2 * distances[0])
    return ProbeSet(
        REACH,
        rows,
        items=[tuple(segments)] * len(rows),
        about=f"{len(rows)} rows of random tokens repeated at distances {', '.join(map(str, distances))}",
        draw_rule=rule,
    )


@dataclass(frozen=True)
class TokenPool:
    """The tokens random-token probes are drawn from, and the rule that chose them in words (`token_pool`): the
    report's legend, the JSON and the probe sets' descriptions say it."""

    tokens: list[int]
    rule: str


def token_pool(train_tokens: np.ndarray | None, tokenizer: Tokenizer, corpus: str | None = None) -> TokenPool:
    """The tokens repeated random tokens are drawn from, by one rule for every model: those the training split holds
    (without the split, a checkpoint whose data is not here, every token of the vocabulary but padding), less the
    tokens that separate examples or documents in the training text, which a model learns to start afresh after:
    end-of-text (GPT-2's, and an imported GPT-2's only special token), and in a corpus of one example a line
    (`data.corpora.ONE_EXAMPLE_A_LINE`, named by `corpus`) every token that holds a newline. A newline inside a
    random sequence would end its line, and the copying with it. In any other text the tool cannot know what a
    newline does, and the rule says it drew it like any other token."""
    if train_tokens is not None and len(train_tokens):
        present = [int(t) for t in np.unique(np.asarray(train_tokens))]
    else:
        present = list(range(len(getattr(tokenizer, "kept_ids", None) or range(tokenizer.vocab_size))))
    with_newline = {t for t, text in zip(present, tokenizer.token_strings(present), strict=True) if "\n" in text}
    left_out, said = set(), []
    eot = getattr(tokenizer, "eot_id", None)
    if eot is not None:
        left_out.add(eot)
        said.append("end-of-text")
    if corpus in ONE_EXAMPLE_A_LINE and with_newline:
        left_out |= with_newline
        said.append(f"the newline (the {corpus} corpus has one example a line)")
    unsure = "the tool cannot tell whether it separates examples in the text this model learned from"
    if not said:
        rule = f"every token drawn, the newline too: {unsure}" if with_newline else "every token drawn"
    else:
        rule = f"{' and '.join(said)} not drawn: {'they separate' if len(said) > 1 else 'it separates'} examples"
        if with_newline - left_out:
            rule += f"; the newline drawn like any token ({unsure})"
    return TokenPool([t for t in present if t not in left_out], rule)


def icl_positions(length: int) -> tuple[range, range]:
    """The token positions (0-based) whose mean losses the in-context score compares, for a context of
    `length` tokens: Olsson's tokens 50 and 500 of 512 are a tenth of the way in and at the end; here
    a band around each (the early one from 5% to 15% of the context, the late one its last tenth),
    because a few held-out windows give too few losses at one position."""
    early = range(max(1, round(0.05 * length)), max(2, round(0.15 * length)))
    late = range(min(length - 1, max(early.stop, round(0.9 * length))), length)
    return early, late


def pair_offset(length: int) -> int:
    """How far on a held-out window's partner starts (`held_out_text`)."""
    early, late = icl_positions(length)
    return late.start - early.start


def held_out_text(
    tokens: np.ndarray | Sequence[int] | None,
    block_size: int,
    *,
    pairs: int | None = None,
    seed: int = 0,
    source: str = "the val split",
) -> ProbeSet | str:
    """`pairs` pairs of windows at random places in `tokens`, drawn with `seed`: a window, then one that starts as far
    on as the in-context score's late band is from its early band (`pair_offset`), so the tokens late in the first
    window are early in the second and the score compares the same tokens with less context and with more. By
    default as many pairs as hold TEXT_TOKENS tokens (at least 2), fewer where the text has fewer places; or why
    there are none (`NO_TEXT` without `tokens`)."""
    if tokens is None:
        return NO_TEXT
    tokens = np.asarray(tokens)
    if block_size < REPEATED_MIN_LENGTH:  # the model's context, not the text, is too short
        return (
            f"block_size {block_size} is below {REPEATED_MIN_LENGTH}, too short for windows of held-out text: "
            f"previous-token, sink, current-token, positional and broad scores are not measurable"
        )
    length = min(block_size, len(tokens))  # less where the text cannot hold a window and its partner that long
    while length >= REPEATED_MIN_LENGTH and length + pair_offset(length) > len(tokens):
        length -= 1
    if length < REPEATED_MIN_LENGTH:
        return (
            f"{source} has {len(tokens)} tokens, too few for held-out text scores (at least "
            f"{REPEATED_MIN_LENGTH + pair_offset(REPEATED_MIN_LENGTH)})"
        )
    offset = pair_offset(length)
    places = len(tokens) - length - offset + 1
    if pairs is None:
        pairs = max(2, TEXT_TOKENS // (2 * length))
    pairs = min(pairs, places)
    starts = np.random.default_rng(seed).choice(places, size=pairs, replace=False)
    # A pair is the window and its partner, which starts `offset` on: the tokens from its start to its partner's end.
    spans = distinct([tokens[start : start + offset + length].astype(np.int64).tolist() for start in starts])
    ids = [span[shift : shift + length] for span in spans for shift in (0, offset)]
    return ProbeSet(
        TEXT,
        ids,
        all_logits=True,
        group=2,
        about=f"{len(ids)} windows of {length} tokens at random places in {source}",
    )


# --- sentences to show ----------------------------------------------------------------------------------


def sentences(texts: Sequence[str], tokenizer: Tokenizer, block_size: int) -> ProbeSet:
    """Sentences for heatmaps and the attention page; one the tokenizer cannot encode is left out and
    one longer than block_size keeps its first block_size tokens, each with a warning."""
    kept_texts, ids = [], []
    for text in texts:
        try:
            encoded = tokenizer.encode(text)
        except TokenizerError as exc:
            warn(f"not watching {text[:60]!r}: {exc}")
            continue
        if not encoded:
            warn(f"not watching {text[:60]!r}: it has no tokens")
            continue
        if len(encoded) > block_size:
            warn(f"attention of {text[:60]!r} shows only its first {block_size} of {len(encoded)} tokens (block_size)")
        kept_texts.append(text)
        ids.append(encoded[:block_size])
    return ProbeSet(SENTENCES, ids, kept_texts, about=f"{len(ids)} sentences")


PRONOUN_WORD = re.compile(r"\b(" + "|".join(sorted(PRONOUNS)) + r")\b", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])['\"\u2019\u201d)]*\s+")
HELD_OUT_SENTENCES = 3
SCANNED_TOKENS = 200_000  # of a long val split, the part whose sentences are looked at


def held_out_sentences(
    tokens: np.ndarray | Sequence[int], tokenizer: Tokenizer, block_size: int, count: int = HELD_OUT_SENTENCES
) -> list[str]:
    """Sentences to watch when a run names none, from its own held-out text: `count` whole sentences
    (whitespace inside made single spaces) from places spread through `tokens`, each of half a block to a
    block of tokens, one with a pronoun where its part of the text has one (the views start from the
    pronoun); none when the text has no such sentence."""
    tokens = np.asarray(tokens)[:SCANNED_TOKENS]
    if not len(tokens):
        return []
    text = tokenizer.decode(tokens.astype(np.int64).tolist())
    fitting = [s for s in (_within(" ".join(s.split()), tokenizer, block_size) for s in SENTENCE_END.split(text)) if s]
    chosen = []
    for part in range(count):
        found = fitting[part * len(fitting) // count : (part + 1) * len(fitting) // count]
        if found:  # a sentence that starts like one and has a pronoun, else one of them, else the first
            chosen.append(min(found, key=lambda s: (not PRONOUN_WORD.search(s), not s[0].isupper())))
    return chosen


def _within(sentence: str, tokenizer: Tokenizer, block_size: int) -> str | None:
    """`sentence` when it has half a block to a block of tokens; a longer one cut to the whole words that fit
    (when that is still half a block); else None."""
    words = sentence.split(" ")[: 2 * block_size]  # more words than any block of tokens holds
    while words:
        try:
            length = len(tokenizer.encode(" ".join(words)))
        except TokenizerError:
            return None
        if length <= block_size:
            return " ".join(words) if length >= block_size // 2 else None
        words = words[:-1]
    return None
