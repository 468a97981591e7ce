"""Named corpora and where their text comes from. The `pronouns` and `induction` corpora are generated
(`data/pronouns.py`, `data/induction.py`), so they need no file at all.

A corpus may name its own probe files (`data.probes`): two-person pronoun probes and single-person
agreement contexts. A lower-case corpus needs lower-case probes, so each corpus points at the ones
made from its own text (`tools/gender_probes.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from common.files import cannot_write, replace_file

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"  # corpora and the BPE cache that sit beside the repository, when present
SEARCH_DIRS = (SHARED / "data", REPO / "data" / "downloads")


@dataclass(frozen=True)
class Corpus:
    filename: str
    url: str
    about: str
    probes_path: Path | None = None  # two-person pronoun probes made from this text
    agreement_path: Path | None = None  # single-person agreement contexts made from it
    repairs: tuple[tuple[str, str], ...] = ()  # text replacements that turn the download into `filename`
    sha256: str = ""  # of the repaired download, when it must be exactly `filename`


def cp1252_repairs(texts: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The repairs of UTF-8 text that was read as cp1252 and then lower-cased: each character of `texts`' strings as
    it reads so, and the text it is put back as (its key there); the longest first, as a shorter one can begin one."""
    misread = [(c.encode().decode("cp1252", "ignore").lower(), text) for text, chars in texts.items() for c in chars]
    return tuple(sorted(misread, key=lambda repair: -len(repair[0])))


CORPORA = {
    "shakespeare": Corpus(
        "tinyshakespeare.txt",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "Tiny Shakespeare (1.1 MB, public domain)",
    ),
    "tinystories": Corpus(
        "tinystories_subset.txt",
        # The validation file of TinyStories V2 (CDLA-Sharing-1.0): 22 MB, a
        # larger stand-in for the subset this project ships its results on.
        "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStoriesV2-GPT4-valid.txt",
        "TinyStories (Eldan & Li 2023, CDLA-Sharing-1.0)",
        probes_path=REPO / "data/probes/gender-subset.jsonl",
        agreement_path=REPO / "data/probes/gender-subset-agreement.jsonl",
    ),
    "tinystories_lower": Corpus(
        "tinystories_lower.txt",
        # The start of the same TinyStories train split, lower-cased upstream (4.2 MB, about 1.0M GPT-2
        # tokens); repaired as ../shared/data/README.md describes (UTF-8 read as cp1252, then lower-cased).
        "https://raw.githubusercontent.com/Arnoochka/Transformer-Parallelism/"
        "911b9e732fbe6d228ba0feacbd6735395f0d279e/tinystories.txt",
        "TinyStories, lower case (Eldan & Li 2023, CDLA-Sharing-1.0)",
        probes_path=REPO / "data/probes/gender-lower.jsonl",
        agreement_path=REPO / "data/probes/gender-lower-agreement.jsonl",
        repairs=cp1252_repairs(
            {'"': "“”«»", "'": "’‘", "-": "–—", "...": "…", "": "¡", "n": "ñ", "a": "á", "e": "é", "o": "ó"}
        ),
        sha256="6737f9146562643f5520682bab0e2f02a9ae0066c4d38f9bc55d639c46c22647",
    ),
}
# The seed of each generated corpus: fixed, so a corpus (and its cache) does not change with the training seed.
GENERATED = {"pronouns": 1234, "induction": 0}
NAMES = (*GENERATED, *CORPORA)
# The corpora whose lines are their examples: a newline there only ever ends one, so random-token probes leave it out
# (`watch.measure.probesets.token_pool`). In any other text the newline is taken for ordinary text.
ONE_EXAMPLE_A_LINE = frozenset(GENERATED)


def corpus_path(name: str) -> Path:
    """The local file of a named corpus: in `../shared/data` beside the repository, else in `data/downloads`, else
    downloaded there from its public address (repaired and checked, for a corpus that gives `repairs` and `sha256`)."""
    corpus = CORPORA[name]
    for folder in SEARCH_DIRS:
        candidate = folder / corpus.filename
        if candidate.is_file():
            return candidate
    import urllib.request  # only to download: the usual case finds the file on disk

    target = REPO / "data" / "downloads" / corpus.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"downloading {corpus.about} from {corpus.url}")
    try:
        with urllib.request.urlopen(corpus.url, timeout=60) as response:
            data = response.read()
    except OSError as exc:
        raise UserError(
            f"cannot download corpus '{name}' from {corpus.url} ({exc}); connect to the internet, "
            f"or save the file as {target}"
        ) from None
    if corpus.repairs or corpus.sha256:
        text = data.decode("utf-8", errors="replace")
        for old, new in corpus.repairs:
            text = text.replace(old, new)
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        if corpus.sha256 and digest != corpus.sha256:
            raise UserError(
                f"the file downloaded from {corpus.url} is not the expected text (sha256 {digest[:12]}, "
                f"expected {corpus.sha256[:12]}); save the corpus as data/downloads/{corpus.filename}"
            )
    try:  # whole, never through a link planted under its name or a temporary one
        replace_file(target, lambda fh: fh.write(data))
    except OSError as exc:
        raise UserError(
            cannot_write(f"the downloaded corpus to {target}", target, exc, "save it there yourself")
        ) from None
    return target


def corpus_of(dataset: str) -> Corpus | None:
    """The named corpus `dataset` names, or whose file it is (by file name); None for any other text."""
    if dataset in CORPORA:
        return CORPORA[dataset]
    name = Path(dataset).name
    return next((corpus for corpus in CORPORA.values() if corpus.filename == name), None)


def text_name(dataset: str) -> str:
    """What a run on `dataset` and its prepared data are named after: a corpus's name, or the text file's name
    without its suffix."""
    return dataset if dataset in NAMES else Path(dataset).stem
