"""Text -> train/val token files on disk, cached by content.

A prepared dataset is a folder holding `train.bin` and `val.bin` (flat token
ids, uint16 when the vocabulary fits, read back with numpy.memmap) and
`meta.json` (tokenizer with its id map, source and its sha256, counts).
Preparing the same text with the same settings again finds the folder and
returns at once.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data import corpora
from data.tokenizer import TOKENIZERS, Tokenizer, build_tokenizer, tokenizer_from_meta
from errors import UserError

META_FORMAT = 1
PRONOUN_CORPUS_SEED = 1234  # fixed, so the corpus (and its cache) does not change with the training seed


@dataclass
class Prepared:
    folder: Path
    meta: dict
    tokenizer: Tokenizer

    @property
    def probes_path(self) -> Path | None:
        name = self.meta.get("probes")
        return self.folder / name if name else None

    def tokens(self, split: str) -> np.memmap:
        return np.memmap(self.folder / f"{split}.bin", dtype=self.meta["dtype"], mode="r")


def read_text(path: str | Path) -> str:
    """A UTF-8 text file, or a clear error saying what is wrong with it."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"data file {path} does not exist; give the path of a UTF-8 text file "
                        f"or a corpus name ({', '.join(corpora.NAMES)})")
    if path.is_dir():
        raise UserError(f"data path {path} is a directory; give the path of a UTF-8 text file inside it")
    raw = path.read_bytes()
    if not raw.strip():
        raise UserError(f"data file {path} is empty; give a file with text in it")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"data file {path} is not UTF-8 (bad byte at offset {exc.start}); "
                        f"convert it, e.g. `iconv -f latin1 -t utf-8`") from None


def _source_text(dataset: str, corpus_sentences: int) -> tuple[str, str, list[dict] | None]:
    """(text, label, probe records or None) for a corpus name or a file path."""
    if dataset == "pronouns":
        from data import pronouns

        text = pronouns.training_text(seed=PRONOUN_CORPUS_SEED, n_sentences=corpus_sentences)
        return text, f"pronouns(seed={PRONOUN_CORPUS_SEED}, n={corpus_sentences})", \
            pronouns.probe_records(seed=PRONOUN_CORPUS_SEED)
    if dataset in corpora.CORPORA:
        path = corpora.corpus_path(dataset)
        return read_text(path), str(path), None
    if not Path(dataset).exists():
        close = difflib.get_close_matches(dataset, corpora.NAMES, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise UserError(f"dataset '{dataset}' is neither a corpus name nor an existing file; {hint}give one of "
                        f"{', '.join(corpora.NAMES)} or the path of a UTF-8 text file")
    return read_text(dataset), str(Path(dataset).resolve()), None


def prepare(dataset: str, tokenizer: str = "char", data_dir: str | Path = "data/prepared",
            val_fraction: float = 0.1, corpus_sentences: int = 30000, quiet: bool = False) -> Prepared:
    if tokenizer not in TOKENIZERS:
        raise UserError(f"unknown tokenizer {tokenizer!r}; choose one of: {', '.join(TOKENIZERS)}")
    text, label, probes = _source_text(dataset, corpus_sentences)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    stem = Path(dataset).stem if not corpora.is_named(dataset) else dataset
    folder = Path(data_dir) / f"{stem}-{tokenizer}-{digest[:12]}-val{val_fraction:g}"
    meta_path = folder / "meta.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except (ValueError, OSError):  # a damaged cache entry is rebuilt, not trusted
            meta = {}
        if meta.get("format") == META_FORMAT and meta.get("source_sha256") == digest:
            return Prepared(folder, meta, tokenizer_from_meta(meta["tokenizer"]))

    tok = build_tokenizer(tokenizer, text)
    ids = np.asarray(tok.encode(text), dtype=np.int64)
    dtype = "uint16" if tok.vocab_size <= np.iinfo(np.uint16).max + 1 else "uint32"
    n_val = int(len(ids) * val_fraction)
    train, val = ids[: len(ids) - n_val], ids[len(ids) - n_val:]
    meta = {
        "format": META_FORMAT,
        "source": label,
        "source_sha256": digest,
        "tokenizer": tok.to_meta(),
        "vocab_size": tok.vocab_size,
        "dtype": dtype,
        "train_tokens": int(len(train)),
        "val_tokens": int(len(val)),
        "val_fraction": val_fraction,
        "probes": "probes.jsonl" if probes else None,
    }

    # Build in a temporary sibling and rename, so an interrupted preparation
    # never leaves a half-written folder that looks complete.
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    except OSError as exc:
        raise _write_error(folder.parent, exc) from None
    try:
        train.astype(dtype).tofile(staging / "train.bin")
        val.astype(dtype).tofile(staging / "val.bin")
        if probes:
            with (staging / "probes.jsonl").open("w") as fh:
                for record in probes:
                    fh.write(json.dumps(record) + "\n")
        (staging / "meta.json").write_text(json.dumps(meta, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            raise _write_error(folder.parent, exc) from None
        raise
    if not quiet:
        print(f"prepared {label}: {len(train):,} train + {len(val):,} val tokens, "
              f"vocabulary {tok.vocab_size} ({tokenizer}) -> {folder}")
    return Prepared(folder, meta, tok)


def _write_error(folder: Path, exc: OSError) -> UserError:
    return UserError(f"cannot write prepared data to {folder} ({exc.strerror or exc}); free disk space or "
                     f"choose a writable --data_dir")
