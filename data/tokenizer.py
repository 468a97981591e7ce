"""Tokenizers: text <-> token ids.

- `char`: one id per character, vocabulary taken from the training corpus (or nanoGPT's `meta.pkl`).
- `gpt2`: GPT-2's byte-pair encoding (tiktoken's `r50k_base`), compacted to the ids that occur in the
  training corpus plus end-of-text, padded to a multiple of 64. A 50k-row output head would cost most of
  a small model's step; a few thousand rows cost little. The id map travels with the prepared data and
  the checkpoint (`to_meta` / `tokenizer_from_meta`).
- `gpt2-full`: GPT-2's byte-pair encoding as it is, all 50,257 ids: the vocabulary of a model trained
  elsewhere on it (GPT-2's own weights, a nanoGPT checkpoint).

All raise `TokenizerError` naming any text the vocabulary cannot express.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path

from common.errors import UserError
from common.files import what_stands_at
from data.corpora import SHARED

TOKENIZERS = ("char", "gpt2")  # what a training run builds from its corpus
FULL_GPT2 = "gpt2-full"  # read from a model trained elsewhere, never built from a corpus
GPT2_ENCODING = "r50k_base"
EOT = "<|endoftext|>"
PAD_MULTIPLE = 64


class TokenizerError(UserError):
    """Text holds characters or tokens outside the vocabulary."""


class TokenizerMetaError(UserError):
    """A saved tokenizer description (meta.json, a checkpoint) that does not describe a tokenizer."""


def preview(items: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(s) for s in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


PIECE = 1 << 20  # characters encoded at a time
# Where a text may be cut into pieces that encode to its own tokens, one piece after the other. Characters: at
# any position. GPT-2's BPE, whose pattern splits a text into runs it then encodes one by one: after a newline
# between two characters that are not white space (a run of that one newline is the same token at the end of a
# piece as in the text), and before a space between a character that is not white space and a letter (such a
# space begins the run of the word after it, whatever came before).
ANYWHERE = re.compile(r"(?s)(?=.)")
BPE_CUTS = re.compile(r"(?<=\S)\n(?=\S)|(?<=\S)(?= [^\W\d_])")


def pieces(text: str, cuts: re.Pattern = ANYWHERE, size: int = PIECE) -> Iterator[str]:
    """`text` in pieces of about `size` characters, each cut at the first of `cuts` after that many (see
    `BPE_CUTS`); a piece with none goes on to the end."""
    start = 0
    while start < len(text):
        found = cuts.search(text, start + size) if start + size < len(text) else None
        end = found.end() if found else len(text)
        yield text[start:end]
        start = end


class CharTokenizer:
    name = "char"
    cuts = ANYWHERE  # where `pieces` may cut a text

    def __init__(self, chars: str) -> None:
        self.chars = chars
        self.vocab_size = len(chars)
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @classmethod
    def from_stoi_itos(cls, stoi: object, itos: object) -> CharTokenizer:
        """nanoGPT's char vocabulary (its meta.pkl's `stoi` {char: id} and `itos` {id: char}), with the same
        ids; `TokenizerMetaError` unless they are one vocabulary of single characters, ids 0..n-1."""
        if not isinstance(itos, dict) or not isinstance(stoi, dict) or not itos:
            raise TokenizerMetaError("the char vocabulary's 'itos' and 'stoi' must be non-empty dicts")
        if any(type(i) is not int for i in itos) or set(itos) != set(range(len(itos))):
            raise TokenizerMetaError(f"the char vocabulary's 'itos' must map the ids 0..{len(itos) - 1} to characters")
        chars = [itos[i] for i in range(len(itos))]
        if not all(isinstance(c, str) and len(c) == 1 for c in chars) or len(set(chars)) != len(chars):
            raise TokenizerMetaError("the char vocabulary's 'itos' must give each id one distinct character")
        if stoi != {c: i for i, c in enumerate(chars)}:
            raise TokenizerMetaError("the char vocabulary's 'stoi' is not the inverse of its 'itos'")
        return cls("".join(chars))

    def encode(self, text: str) -> list[int]:
        try:
            return [self._index[c] for c in text]
        except KeyError:
            unknown = self.unknown(text)
            known = sorted(self.chars, key=lambda char: (not char.isalnum(), char))  # letters and digits first
            raise TokenizerError(
                f"{len(unknown)} character(s) not in the char vocabulary: {preview(unknown)}; "
                f"use the {len(self.chars)} it knows ({preview(known, 12)}), or "
                f"train on a corpus that contains them"
            ) from None

    def unknown(self, text: str) -> list[str]:
        return sorted({c for c in text if c not in self._index})

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.chars[i] for i in ids]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        return self.encode(text), [(i, i + 1) for i in range(len(text))]

    def to_meta(self) -> dict:
        return {"name": self.name, "chars": self.chars}


SHARED_TIKTOKEN = SHARED / "tiktoken"
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"  # as tiktoken_ext names it
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_CHECKED: set[str] = set()  # cache files found intact in this process


def gpt2_encoding():
    """tiktoken's r50k_base (GPT-2's BPE), which tiktoken downloads once into its cache. Offline, it is read
    from TIKTOKEN_CACHE_DIR or, when that is unset, from a `shared/tiktoken` cache beside the repository.
    A UserError when it cannot be loaded: not the fault of the data or the checkpoint that names it."""
    import hashlib
    import tempfile

    import tiktoken

    if "TIKTOKEN_CACHE_DIR" not in os.environ and SHARED_TIKTOKEN.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(SHARED_TIKTOKEN)
    cache = os.environ.get("TIKTOKEN_CACHE_DIR", "(unset)")
    # tiktoken's copy is in TIKTOKEN_CACHE_DIR, else DATA_GYM_CACHE_DIR, else data-gym-cache in the temporary
    # folder ("" turns its cache off). A damaged one it would delete and try to download again, failing offline.
    cache_dir = os.environ.get(
        "TIKTOKEN_CACHE_DIR",
        os.environ.get("DATA_GYM_CACHE_DIR", os.path.join(tempfile.gettempdir(), "data-gym-cache")),
    )
    path = os.path.join(cache_dir, hashlib.sha1(R50K_URL.encode()).hexdigest())
    problem = what_stands_at(Path(path)) if cache_dir else None
    if problem is not None and not problem.startswith(("missing", "unreadable")):  # a pipe would block its reader
        raise UserError(
            f"cannot load the GPT-2 BPE ({GPT2_ENCODING}): the tiktoken cache's {path} is {problem}, not the file "
            f"of it; move that away so tiktoken downloads the file again, or set TIKTOKEN_CACHE_DIR to a good cache "
            f"(now {cache})"
        )
    try:
        intact = not cache_dir or path in _CHECKED or hashlib.sha256(Path(path).read_bytes()).hexdigest() == R50K_SHA256
    except OSError:  # absent (tiktoken downloads it) or unreadable: tiktoken says what is wrong
        intact = None
    if intact is False:
        raise UserError(
            f"cannot load the GPT-2 BPE ({GPT2_ENCODING}): the tiktoken cache holds a damaged copy of it, {path} "
            f"(its sha256 is not {R50K_SHA256[:12]}...); delete that file so tiktoken downloads it again, or set "
            f"TIKTOKEN_CACHE_DIR to a good cache (now {cache})"
        )
    if intact and cache_dir:
        _CHECKED.add(path)
    try:
        return tiktoken.get_encoding(GPT2_ENCODING)
    except Exception as exc:  # network or cache problems surface as many types
        raise UserError(
            f"cannot load the GPT-2 BPE ({GPT2_ENCODING}): {type(exc).__name__}: {exc}; connect to the "
            f"internet once, or set TIKTOKEN_CACHE_DIR to a tiktoken cache (now {cache})"
        ) from None


class GPT2Tokenizer:
    name = "gpt2"
    cuts = BPE_CUTS

    def __init__(self, kept_ids: Sequence[int]) -> None:
        """kept_ids[i] is the r50k_base id of compact id i (end-of-text included)."""
        self.enc = gpt2_encoding()
        self.kept_ids = list(kept_ids)
        if self.enc.eot_token not in self.kept_ids or not all(0 <= i < self.enc.n_vocab for i in self.kept_ids):
            raise TokenizerMetaError(
                f"the gpt2 tokenizer's 'kept_ids' must be ids of {GPT2_ENCODING} "
                f"(0..{self.enc.n_vocab - 1}) including end-of-text ({self.enc.eot_token})"
            )
        self._to_compact = {orig: i for i, orig in enumerate(self.kept_ids)}
        # Padding rows are never targets; a multiple of 64 keeps matmuls aligned.
        self.vocab_size = -(-len(self.kept_ids) // PAD_MULTIPLE) * PAD_MULTIPLE
        self.eot_id = self._to_compact[self.enc.eot_token]

    @classmethod
    def from_text(cls, text: str) -> GPT2Tokenizer:
        enc = gpt2_encoding()
        kept = {enc.eot_token}
        for piece in pieces(text, cls.cuts):  # piece by piece: a long text's ids are never all Python ints
            kept.update(_original_ids(enc, piece))
        return cls(sorted(kept))

    def _compact(self, original: list[int], text: str) -> list[int]:
        try:
            return [self._to_compact[t] for t in original]
        except KeyError:
            unknown = self.unknown(text)
            # Whole words of this vocabulary, the most common first (GPT-2's BPE gives common words low ids).
            strings = (self.enc.decode_single_token_bytes(t).decode("utf-8", errors="replace") for t in self.kept_ids)
            words = (s[1:] for s in strings if s.startswith(" ") and s[1:].isalpha() and len(s) > 3)
            raise TokenizerError(
                f"{len(unknown)} token(s) never seen in the training corpus: {preview(unknown)}; "
                f"rephrase with words it knows ({len(self.kept_ids):,} tokens, e.g. "
                f"{preview(list(islice(words, 8)), 8)}), or train on a corpus that contains them"
            ) from None

    def unknown(self, text: str) -> list[str]:
        """The tokens of `text` this vocabulary lacks, as text, sorted."""
        unseen = {t for t in _original_ids(self.enc, text) if t not in self._to_compact}
        # A token can be part of a character's UTF-8 bytes; those show as \xNN rather than all as U+FFFD.
        return sorted(
            {self.enc.decode_single_token_bytes(t).decode("utf-8", errors="backslashreplace") for t in unseen}
        )

    def encode(self, text: str) -> list[int]:
        return self._compact(_original_ids(self.enc, text), text)

    def decode(self, ids: Sequence[int]) -> str:
        # Padding ids (>= len(kept_ids)) are never trained as targets; show them as nothing.
        return self.enc.decode([self.kept_ids[i] for i in ids if i < len(self.kept_ids)])

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.enc.decode([self.kept_ids[i]]) if i < len(self.kept_ids) else "<pad>" for i in ids]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        original = _original_ids(self.enc, text)
        ids = self._compact(original, text)
        spans, pos = [], 0
        for t in original:
            piece = self.enc.decode_single_token_bytes(t).decode("utf-8", errors="replace")
            # A piece that is part of a UTF-8 character decodes to U+FFFD: it takes the next character of `text`.
            found = text.find(piece, pos) if "\ufffd" not in piece else -1
            start = found if found >= 0 else pos
            end = start + len(piece) if found >= 0 else min(len(text), pos + 1)
            spans.append((start, end))
            pos = end
        return ids, spans

    def to_meta(self) -> dict:
        return {"name": self.name, "encoding": GPT2_ENCODING, "kept_ids": self.kept_ids}


def _original_ids(enc, text: str) -> list[int]:
    return enc.encode(text, allowed_special={EOT}, disallowed_special=())


class FullGPT2Tokenizer(GPT2Tokenizer):
    """GPT-2's BPE with every r50k_base id as tiktoken gives it (50,257, end-of-text included): the
    vocabulary of GPT-2's own weights. A model may have more rows than that (nanoGPT pads to 50,304);
    those ids belong to no text. Every id is kept under its own number, so every text has tokens."""

    name = FULL_GPT2

    def __init__(self) -> None:
        super().__init__(range(gpt2_encoding().n_vocab))
        self.vocab_size = self.enc.n_vocab

    def to_meta(self) -> dict:
        return {"name": self.name, "encoding": GPT2_ENCODING}


Tokenizer = CharTokenizer | GPT2Tokenizer  # FullGPT2Tokenizer is a GPT2Tokenizer


def known_token(tokenizer: Tokenizer) -> list[int]:
    """One token every model of this tokenizer knows, to start a sample from: end-of-text for GPT-2's BPE (where its
    documents start), else a space, else the first character."""
    eot = getattr(tokenizer, "eot_id", None)
    return [eot] if eot is not None else tokenizer.encode(" " if " " in tokenizer.chars else tokenizer.chars[0])


def build_tokenizer(name: str, text: str) -> Tokenizer:
    """A tokenizer whose vocabulary covers `text` (the training corpus)."""
    if name not in TOKENIZERS:
        raise UserError(f"unknown tokenizer {name!r}; choose one of: {', '.join(TOKENIZERS)}")
    return (CharTokenizer if name == "char" else GPT2Tokenizer).from_text(text)


def tokenizer_from_meta(meta: object) -> Tokenizer:
    """The tokenizer `to_meta` described. Metadata comes from files a user can edit (a prepared
    dataset's meta.json, a checkpoint), so anything malformed is a `TokenizerMetaError` saying what."""
    name = meta.get("name") if isinstance(meta, dict) else None
    if name == "char":
        chars = meta.get("chars")
        if not isinstance(chars, str) or not chars or len(set(chars)) != len(chars):
            raise TokenizerMetaError("the char tokenizer's 'chars' is not a string of distinct characters")
        return CharTokenizer(chars)
    if name == "gpt2":
        kept = meta.get("kept_ids")
        if not isinstance(kept, list) or not all(type(i) is int for i in kept) or len(set(kept)) != len(kept):
            raise TokenizerMetaError("the gpt2 tokenizer's 'kept_ids' is not a list of distinct token ids")
        return GPT2Tokenizer(kept)
    if name == FULL_GPT2:
        if meta.get("encoding") != GPT2_ENCODING:
            raise TokenizerMetaError(f"the {FULL_GPT2} tokenizer's 'encoding' must be {GPT2_ENCODING!r}")
        return FullGPT2Tokenizer()
    raise TokenizerMetaError(f"unknown tokenizer {name!r}; expected one of: {', '.join((*TOKENIZERS, FULL_GPT2))}")
