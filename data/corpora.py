"""Named corpora and where their text comes from.

A name resolves to text in this order: `../shared/data` beside the repository,
then `data/downloads`, then a download from the corpus's public address. The
`pronouns` corpus is generated, so it needs no file at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from errors import UserError

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"  # corpora and the BPE cache that sit beside the repository, when present
SEARCH_DIRS = (SHARED / "data", REPO / "data" / "downloads")


@dataclass(frozen=True)
class Corpus:
    filename: str
    url: str
    about: str


CORPORA = {
    "shakespeare": Corpus(
        "tinyshakespeare.txt",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "Tiny Shakespeare (1.1 MB, public domain)"),
    "tinystories": Corpus(
        "tinystories_subset.txt",
        # The validation file of TinyStories V2 (CDLA-Sharing-1.0): 22 MB, a
        # larger stand-in for the subset this project ships its results on.
        "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStoriesV2-GPT4-valid.txt",
        "TinyStories (Eldan & Li 2023, CDLA-Sharing-1.0)"),
}
GENERATED = ("pronouns",)
NAMES = (*GENERATED, *CORPORA)


def corpus_path(name: str) -> Path:
    """The local file of a named corpus, downloading it if it is nowhere here."""
    corpus = CORPORA[name]
    for folder in SEARCH_DIRS:
        candidate = folder / corpus.filename
        if candidate.is_file():
            return candidate
    import urllib.request  # only to download: the usual case finds the file on disk

    target = REPO / "data" / "downloads" / corpus.filename
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"downloading {corpus.about} from {corpus.url}")
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(corpus.url, timeout=60) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise UserError(f"cannot download corpus '{name}' from {corpus.url} ({exc}); connect to the internet, "
                        f"or save the file as {target}") from None
    partial.replace(target)
    return target


def is_named(dataset: str) -> bool:
    return dataset in NAMES
