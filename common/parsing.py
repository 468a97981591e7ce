"""Parsing what users and disks hand us: JSON, TOML and whole numbers, every way they can fail one `NotParsed` whose
str() says why in a few words, and `quoted`, how a message shows a value it quotes."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable


class NotParsed(ValueError):
    """JSON, TOML or a number that cannot be read; str() says why, in a few words."""


def quoted(text: str) -> str:
    """`repr(text)`, cut short when longer than 60 characters: "'1111111111...' (5,003 characters)"."""
    shown = repr(text)
    return shown if len(shown) <= 60 else f"{shown[:50]}...' ({len(text):,} characters)"


MAX_DIGITS = 40  # more than any count, size, position or seed takes (2**128 has 39)


def is_whole_number(text: str) -> bool:
    return re.fullmatch(r"[+-]?[0-9]+(?:_[0-9]+)*", text) is not None  # as Python and TOML write one: 12, -3, 10_000


def parse_int(text: str) -> int:
    """`text` as a whole number (is_whole_number); anything else a ValueError, as int()'s, other digits too ('²', which
    int() refuses; '٣', which it reads). More than MAX_DIGITS digits is a `NotParsed`, never Python's own limit."""
    if not is_whole_number(text):
        raise ValueError(f"{quoted(text)} is not a whole number")
    digits = len(text.lstrip("+-").replace("_", ""))
    if digits > MAX_DIGITS:
        raise NotParsed(f"a number of {digits:,} digits, more than any setting takes ({MAX_DIGITS} at most)")
    return int(text)


TOO_DEEP = "its brackets are nested too deeply to read"


class _Twice(ValueError):
    """A key given twice in one JSON object."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    if len({key for key, _ in pairs}) < len(pairs):
        raise _Twice
    return dict(pairs)


def _json(text: str | bytes) -> object:
    return json.loads(text, object_pairs_hook=_unique_keys)


# In valid JSON: a string, and the colon after it when it is a key; or a bracket.
JSON_TOKENS = re.compile(r'("(?:[^"\\]|\\.)*")(\s*:)?|[{}\[\]]')


def _given_twice(text: str) -> tuple[str, int]:
    """The first key of valid JSON `text` given twice in one object, and the line of its second mention."""
    keys: list[set | None] = []  # of each object or list open at this point: the keys its object has (None: a list)
    for token in JSON_TOKENS.finditer(text):
        if token[0] in ("{", "["):
            keys.append(set() if token[0] == "{" else None)
        elif token[0] in ("}", "]"):
            keys.pop()
        elif token[2] and keys[-1] is not None:
            key = json.loads(token[1])
            if key in keys[-1]:
                return key, text.count("\n", 0, token.start()) + 1
            keys[-1].add(key)
    raise ValueError("no key is given twice")


def parse_json(text: str | bytes, load: Callable = _json) -> object:
    """`load(text)` (JSON, or TOML with `tomllib.loads`), every way it can fail a `NotParsed`: bad syntax, nesting too
    deep for Python's recursion, or a key given twice in one JSON object (JSON readers keep either value, so which
    one the writer meant is unknown; TOML refuses it itself)."""
    try:
        return load(text)
    except _Twice:
        shown = text.decode(json.detect_encoding(text)) if isinstance(text, bytes) else text
        key, line = _given_twice(shown)
        where = f" (at line {line})" if "\n" in shown.strip() else ""  # one line: its caller names the file's line
        raise NotParsed(f"the key {quoted(key)} is given twice{where}; keep one") from None
    except json.JSONDecodeError as exc:
        where = f"at column {exc.colno}" if exc.lineno == 1 else f"at line {exc.lineno}, column {exc.colno}"
        raise NotParsed(f"{exc.msg} {where}") from None
    except tomllib.TOMLDecodeError as exc:
        raise NotParsed(str(exc)) from None
    except RecursionError:
        raise NotParsed(TOO_DEEP) from None
    except (UnicodeDecodeError, MemoryError) as exc:
        raise NotParsed(type(exc).__name__) from None
