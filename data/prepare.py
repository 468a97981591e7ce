"""Text -> train/val token files on disk, cached by content.

A prepared dataset is a folder holding `train.bin` and `val.bin` (flat token ids, uint16 when the
vocabulary fits, read back with numpy.memmap) and `meta.json` (tokenizer with its id map, source and
its sha256, counts, and checksums of the files and of itself). Preparing the same text with the same
settings again finds the folder, checks it against what its meta.json promises, and returns at once.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import importlib
import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.cli import say
from common.errors import UserError, warn
from common.files import cannot_write, read_text, replace_folder, what_stands_at
from common.parsing import NotParsed, parse_json
from data import corpora
from data.tokenizer import (
    Tokenizer,
    TokenizerError,
    TokenizerMetaError,
    build_tokenizer,
    pieces,
    preview,
    tokenizer_from_meta,
)

META_FORMAT = 2  # 2: meta.json carries checksums of itself and of the token files
SPLITS = ("train", "val")
CHUNK = 1 << 24  # bytes read at a time when checking a token file (a multiple of every dtype's size)


@dataclass(frozen=True)
class ModelVocabulary:
    """The tokenizer of the model a run fine-tunes (`init_from`): data is prepared with it as it is."""

    tokenizer: Tokenizer
    model: str


@dataclass
class Prepared:
    folder: Path
    meta: dict
    tokenizer: Tokenizer

    @property
    def probes_path(self) -> Path | None:
        name = self.meta.get("probes")
        return self.folder / name if name else None

    def tokens(self, split: str) -> np.ndarray:
        if not self.meta[f"{split}_tokens"]:  # numpy cannot map an empty file
            return np.zeros(0, dtype=self.meta["dtype"])
        return np.memmap(self.folder / f"{split}.bin", dtype=self.meta["dtype"], mode="r")

    def splits(self, block_size: int) -> dict[str, np.ndarray]:
        """{"train": ids, "val": ids}, each checked to hold a window of `block_size` + 1 tokens with room to draw it."""
        splits = {split: self.tokens(split) for split in SPLITS}
        for split, tokens in splits.items():
            if len(tokens) < block_size + 2:
                raise _too_short(split, {s: len(t) for s, t in splits.items()}, block_size, self.meta)
        return splits


def read_data_file(path: str | Path) -> str:
    fix = f"give the path of a UTF-8 text file or a corpus name ({', '.join(corpora.NAMES)})"
    text = read_text(path, "data file", fix)
    if not text.strip(" \t\n\r\x0b\x0c"):  # what bytes.strip() takes for white space
        raise UserError(f"data file {path} is empty; give a file with text in it")
    return text


def source_text(dataset: str, corpus_sentences: int) -> tuple[str, str, list[dict] | None]:
    """(text, label, probe records or None) for a corpus name or a file path."""
    if dataset in corpora.GENERATED:
        module, seed = importlib.import_module(f"data.{dataset}"), corpora.GENERATED[dataset]
        text = module.training_text(seed, corpus_sentences)
        probes = module.probe_records(seed=seed) if dataset == "pronouns" else None
        return text, f"{dataset}(seed={seed}, n={corpus_sentences})", probes
    if dataset in corpora.CORPORA:
        path = corpora.corpus_path(dataset)
        return read_data_file(path), str(path), None
    if not Path(dataset).exists():
        close = difflib.get_close_matches(dataset, corpora.NAMES, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise UserError(
            f"dataset '{dataset}' is neither a corpus name nor an existing file; {hint}give one of "
            f"{', '.join(corpora.NAMES)} or the path of a UTF-8 text file"
        )
    return read_data_file(dataset), str(Path(dataset).resolve()), None


def prepare(
    dataset: str,
    tokenizer: str | ModelVocabulary = "char",
    data_dir: str | Path = "data/prepared",
    val_fraction: float = 0.1,
    corpus_sentences: int = 30000,
    quiet: bool = False,
) -> Prepared:
    """The prepared token files of `dataset` (cached as the module's docstring says), built with a tokenizer
    built from its text or with a model's vocabulary (`ModelVocabulary`), which must cover it."""
    fixed = tokenizer if isinstance(tokenizer, ModelVocabulary) else None
    wanted = {"tokenizer": fixed.tokenizer.to_meta()} if fixed is not None else {}
    # A model's vocabulary is named by its kind and a digest, e.g. "char-5f0c1a2b", in cache folders and a
    # checkpoint's data record: two vocabularies never share prepared data.
    name = f"{fixed.tokenizer.name}-{_digest(wanted['tokenizer'])[:8]}" if fixed is not None else tokenizer
    data_dir = Path(data_dir)
    recipe = generation_key(dataset, corpus_sentences)
    if recipe is not None:  # generating the default demo's corpus only to find its cache took 0.2 s of 7
        found = _first_intact(
            (folder, {**wanted, "generation": recipe, "vocabulary": name if fixed else None})
            for folder in _folders(data_dir, dataset, name, val_fraction)
        )
        if found is not None:
            return found
    text, label, probes = source_text(dataset, corpus_sentences)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    folder = data_dir / f"{corpora.text_name(dataset)}-{name}-{digest[:12]}-val{val_fraction:g}"
    try:
        cached, problem = _cached(folder, {"source_sha256": digest, **wanted})
    except OSError as exc:  # e.g. a folder that cannot be read: say so rather than rebuild over it
        raise UserError(
            f"cannot read prepared data in {folder} ({exc.strerror or exc}); check its permissions "
            f"or choose another --data_dir"
        ) from None
    if cached is not None:
        return cached
    if problem is not None and not quiet:
        warn(f"prepared data in {folder} cannot be used as it is ({problem}); rebuilding it from {label}")
    try:
        tok, train, val = _tokenize(text, tokenizer, val_fraction, label)
    except MemoryError:
        fix = "lower --corpus_sentences" if dataset in corpora.GENERATED else "use a smaller text"
        raise UserError(f"not enough memory to tokenize {label} ({len(text):,} characters); {fix}") from None
    meta = {
        "format": META_FORMAT,
        "source": label,
        "source_sha256": digest,
        "tokenizer": tok.to_meta(),
        "vocab_size": tok.vocab_size,
        "dtype": _dtype_for(tok.vocab_size),
        "train_tokens": int(len(train)),
        "val_tokens": int(len(val)),
        "val_fraction": val_fraction,
        "probes": "probes.jsonl" if probes else None,
        **({"generation": recipe} if recipe is not None else {}),
        **({"vocabulary": name} if fixed is not None else {}),
    }
    _write(folder, meta, {"train.bin": train, "val.bin": val}, probes)
    if not quiet:
        whose = f"{tok.name}, of {fixed.model}" if fixed is not None else tokenizer
        say(
            f"prepared {label}: {len(train):,} train + {len(val):,} val tokens, "
            f"vocabulary {tok.vocab_size} ({whose}) -> {folder}"
        )
    return Prepared(folder, meta, tok)


def generation_key(dataset: str, corpus_sentences: int) -> str | None:
    """For a generated corpus, a digest of everything its text depends on: the generating module's source, the
    seed, the number of lines and Python's version (whose `random` draws it); None for any other dataset."""
    if dataset not in corpora.GENERATED:
        return None
    module, seed = importlib.import_module(f"data.{dataset}"), corpora.GENERATED[dataset]
    recipe = f"{dataset}|{seed}|{corpus_sentences}|{sys.version_info[0]}.{sys.version_info[1]}|".encode()
    return hashlib.sha256(recipe + Path(module.__file__).read_bytes()).hexdigest()


def _folders(data_dir: Path, dataset: str, tokenizer: str, val_fraction: float) -> list[Path]:
    """The cache folders of `dataset` prepared with `tokenizer` (a name, or a model vocabulary's label)."""
    try:
        prefix = glob.escape(f"{corpora.text_name(dataset)}-{tokenizer}")
        return sorted(data_dir.glob(f"{prefix}-*-val{val_fraction:g}"))
    except OSError:
        return []


def _first_intact(candidates: Iterable[tuple[Path, dict]]) -> Prepared | None:
    """The first intact preparation among (folder, what its meta.json must record) pairs, or None."""
    for folder, wanted in candidates:
        try:
            cached, _ = _cached(folder, wanted)
        except OSError:
            continue
        if cached is not None:
            return cached
    return None


def find_prepared(settings: dict, tokenizer_meta: dict) -> Prepared | None:
    """The prepared data a run with these settings (a checkpoint's `data`, or its train_config) used,
    when it is still on disk and intact; None otherwise. Nothing is prepared or downloaded."""
    wanted = {"tokenizer": tokenizer_meta}
    folder, digest = settings.get("folder"), settings.get("source_sha256")
    candidates = []
    if isinstance(folder, str) and isinstance(digest, str):
        candidates.append((Path(folder), {**wanted, "source_sha256": digest}))
    dataset, tokenizer = settings.get("dataset"), settings.get("tokenizer")
    data_dir, fraction = settings.get("data_dir", "data/prepared"), settings.get("val_fraction")
    if all(isinstance(v, str) for v in (dataset, tokenizer, data_dir)) and isinstance(fraction, float):
        candidates += [(path, wanted) for path in _folders(Path(data_dir), dataset, tokenizer, fraction)]
    return _first_intact(candidates)


def _too_short(split: str, sizes: dict[str, int], block_size: int, meta: dict) -> UserError:
    """Why `split` is shorter than one window, and the fix that helps: a longer text or a smaller block
    when the whole text is short, otherwise a split of the text that leaves each part enough."""
    need = block_size + 2
    total = sizes["train"] + sizes["val"]
    fraction = meta.get("val_fraction", 0.1)
    problem = f"the {split} split has {sizes[split]:,} tokens, fewer than block_size + 2 = {need}"
    if total < 2 * need:
        generated = str(meta.get("source", "")).startswith(tuple(f"{name}(" for name in corpora.GENERATED))
        more = "raise --corpus_sentences" if generated else "use a longer text"
        # Each fix must work at the split the user has, or name the split it needs.
        fixes = [
            f"{more} (at least {math.ceil(need / min(fraction, 1 - fraction)):,} tokens at --val_fraction={fraction:g})"
        ]
        if min(sizes.values()) - 2 >= 1:
            fixes.append(f"a --block_size of at most {min(sizes.values()) - 2}")
        elif total // 2 - 2 >= 1:
            fixes.append(f"--val_fraction=0.5 with a --block_size of at most {total // 2 - 2}")
        return UserError(
            f"{problem}: the text has {total:,} tokens in all, too few for both splits; {' or '.join(fixes)}"
        )
    # The fraction nearest the one in use (to 2 significant digits) that gives the short split a window.
    val = split == "val"
    suggested = float(f"{(need if val else total - need) / total:.2g}")
    while (int(total * suggested) if val else total - int(total * suggested)) < need:
        suggested = float(f"{suggested * (1.1 if val else 0.9):.2g}")
    why, bound = (f"of {total:,} tokens is too small", "more") if val else ("leaves too little for training", "less")
    return UserError(f"{problem}: --val_fraction={fraction:g} {why}; use --val_fraction={suggested:g} or {bound}")


def _tokenize(
    text: str, tokenizer: str | ModelVocabulary, val_fraction: float, label: str
) -> tuple[Tokenizer, np.ndarray, np.ndarray]:
    """(tokenizer, train ids, val ids); refuses text with a single kind of token: nothing to learn."""
    tok = tokenizer.tokenizer if isinstance(tokenizer, ModelVocabulary) else build_tokenizer(tokenizer, text)
    dtype = _dtype_for(tok.vocab_size)
    try:  # piece by piece, so memory stays a small multiple of the text's however long it is
        parts = [np.asarray(tok.encode(piece), dtype=np.int64).astype(dtype) for piece in pieces(text, tok.cuts)]
    except TokenizerError:  # only a model's vocabulary lacks what the text holds: a character, or GPT-2 tokens
        missing, what = tok.unknown(text), "character" if tok.name == "char" else "token"
        raise UserError(
            f"{label} holds {len(missing):,} {what}(s) that the model {tokenizer.model} never had: "
            f"{preview(missing, 5)}; remove them from the text, or fine-tune a model whose vocabulary "
            f"has them"
        ) from None
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    if ids.min() == ids.max():
        token = tok.token_strings([int(ids[0])])[0]
        times = f"{len(ids):,} times" if len(ids) > 1 else "once"
        raise UserError(
            f"{label} holds one kind of token only ({token!r}, {times}), so there is nothing to "
            f"predict; give a text with more than one kind of "
            f"{'character' if tok.name == 'char' else 'word'}"
        )
    n_val = int(len(ids) * val_fraction)
    return tok, ids[: len(ids) - n_val], ids[len(ids) - n_val :]


def _dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= np.iinfo(np.uint16).max + 1 else "uint32"


def _write(folder: Path, meta: dict, splits: dict[str, np.ndarray], probes: list[dict] | None) -> None:
    """Writes the files, then meta.json with their checksums and its own, as one folder (meta.json last): an
    interrupted preparation never leaves a folder that looks complete."""

    def write(staging: Path) -> None:
        for name, ids in splits.items():
            ids.astype(meta["dtype"]).tofile(staging / name)
        if probes:
            (staging / meta["probes"]).write_text("".join(json.dumps(record) + "\n" for record in probes))
        meta["sha256"] = {path.name: _scan(path)[0] for path in sorted(staging.iterdir())}
        meta["checksum"] = _meta_checksum(meta)
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        replace_folder(folder, write, last="meta.json")
    except OSError as exc:
        wanted = {"source_sha256": meta["source_sha256"], "tokenizer": meta["tokenizer"]}
        if _first_intact([(folder, wanted)]) is not None:
            return  # a preparation of the same text running beside this one wrote the folder first
        raise UserError(
            cannot_write(f"prepared data to {folder.parent}", folder.parent, exc, "choose a writable --data_dir")
        ) from None


# --- checking a cached preparation --------------------------------------------------------------


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def _meta_checksum(meta: dict) -> str:
    return _digest({key: value for key, value in meta.items() if key != "checksum"})


def _scan(path: Path, dtype: str | None = None) -> tuple[str, int]:
    """(sha256 of the file, its largest value read as `dtype`: -1 when empty or no dtype), in one pass."""
    sha, largest = hashlib.sha256(), -1
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
            if dtype is not None:
                largest = max(largest, int(np.frombuffer(chunk, dtype=dtype).max()))
    return sha.hexdigest(), largest


_ANOTHER = {
    "source_sha256": "text",
    "tokenizer": "vocabulary",
    "vocabulary": "vocabulary",
    "generation": "generated text",
}  # what a folder recording something else than `wanted` holds


def _cached(folder: Path, wanted: dict) -> tuple[Prepared | None, str | None]:
    """(the cached preparation, None) when `folder` holds exactly what its meta.json promises, and meta.json
    records each value of `wanted` (the source's sha256, a model's vocabulary as `to_meta` describes it, ...);
    otherwise (None, what does not match), or (None, None) when there is no cache yet."""
    if not folder.exists() and not folder.is_symlink():
        return None, None
    meta_path = folder / "meta.json"
    problem = what_stands_at(meta_path, follow_links=False)  # a link is wrong too: the cache holds its own files
    if problem is not None:
        return None, f"meta.json is {problem}"
    try:
        meta = parse_json(meta_path.read_bytes())
    except NotParsed as exc:
        return None, f"meta.json is not valid JSON: {exc}"
    if not isinstance(meta, dict):
        return None, "meta.json does not hold a JSON object"
    if meta.get("format") != META_FORMAT:
        return None, f"meta.json has format {meta.get('format')!r}; this version writes {META_FORMAT}"
    if meta.get("checksum") != _meta_checksum(meta):
        return None, "meta.json was changed after it was written: its checksum does not match"
    for key, value in wanted.items():
        if meta.get(key) != value:
            return None, f"meta.json describes another {_ANOTHER[key]}"
    try:
        tok = tokenizer_from_meta(meta["tokenizer"])
        problem = _problem(folder, meta, tok)
    except (KeyError, TypeError, AttributeError, ValueError, TokenizerMetaError) as exc:
        return None, f"meta.json is malformed ({type(exc).__name__}: {exc})"
    if problem is not None:
        return None, problem
    return Prepared(folder, meta, tok), None


def _problem(folder: Path, meta: dict, tok: Tokenizer) -> str | None:
    """What in meta.json contradicts itself, or in the files contradicts meta.json (size, checksum, token
    range); None when nothing does."""
    if meta["vocab_size"] != tok.vocab_size:
        return f"its vocabulary has {tok.vocab_size} tokens, not the {meta['vocab_size']} it states"
    if meta["dtype"] != _dtype_for(tok.vocab_size):
        return f"dtype {meta['dtype']!r} is not {_dtype_for(tok.vocab_size)!r}, the type of this vocabulary's ids"
    for split in SPLITS:
        count = meta[f"{split}_tokens"]
        if type(count) is not int or count < 0:
            return f"{split}_tokens is {count!r}, not a count"
    itemsize = np.dtype(meta["dtype"]).itemsize
    files = {f"{split}.bin": meta[f"{split}_tokens"] * itemsize for split in SPLITS}
    if meta.get("probes"):
        files[meta["probes"]] = None
    for name, size in files.items():
        path = folder / name
        problem = what_stands_at(path, follow_links=False)
        if problem is not None:
            return f"{name} is {problem}"
        if size is not None and path.stat().st_size != size:
            return (
                f"{name} has {path.stat().st_size:,} bytes where {size // itemsize:,} {meta['dtype']} tokens "
                f"take {size:,}"
            )
        sha, largest = _scan(path, meta["dtype"] if size is not None else None)
        if sha != meta["sha256"][name]:
            return f"the contents of {name} do not match its checksum"
        if size is not None and largest >= meta["vocab_size"]:
            return f"{name} holds token id {largest}, outside the vocabulary of {meta['vocab_size']}"
    return None
