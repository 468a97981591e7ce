"""Tokenizers, preparation into token files, and batches."""

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from data.batches import Batches
from data.prepare import prepare
from data.tokenizer import CharTokenizer, GPT2Tokenizer, TokenizerError, tokenizer_from_meta

TEXT = "The dog fetched the ball and she was happy.\nThe ball rolled away and it stopped.\n" * 30


def test_char_tokenizer_round_trips_and_names_unknown_characters():
    tok = CharTokenizer.from_text(TEXT)
    assert tok.decode(tok.encode(TEXT)) == TEXT
    with pytest.raises(TokenizerError, match="'Z'"):
        tok.encode("Zebra")


def test_gpt2_vocabulary_is_compacted_and_padded():
    tok = GPT2Tokenizer.from_text(TEXT)
    assert tok.vocab_size % 64 == 0 and tok.vocab_size < 100
    assert tok.decode(tok.encode(TEXT)) == TEXT
    assert tok.eot_id < tok.vocab_size
    assert tokenizer_from_meta(tok.to_meta()).encode(TEXT) == tok.encode(TEXT)
    with pytest.raises(TokenizerError, match="never seen in the training corpus.*' cat'"):
        tok.encode("the cat")


def test_bpe_offsets_cover_the_text():
    tok = GPT2Tokenizer.from_text(TEXT)
    text = "The dog fetched the ball"
    ids, spans = tok.encode_with_offsets(text)
    assert [text[a:b] for a, b in spans] == ["The", " dog", " fet", "ched", " the", " ball"]


@pytest.mark.parametrize("tokenizer", ["char", "gpt2"])
def test_prepare_writes_memmaps_with_metadata_and_caches(tmp_path, tokenizer):
    src = tmp_path / "story.txt"
    src.write_text(TEXT)
    first = prepare(str(src), tokenizer, tmp_path / "prep", quiet=True)
    train, val = first.tokens("train"), first.tokens("val")
    assert train.dtype == np.uint16
    assert len(val) == int((len(train) + len(val)) * 0.1)
    meta = json.loads((first.folder / "meta.json").read_text())
    assert meta["train_tokens"] == len(train) and meta["tokenizer"]["name"] == tokenizer
    assert len(meta["source_sha256"]) == 64
    decoded = first.tokenizer.decode(np.concatenate([train, val]).tolist())
    assert decoded == TEXT
    mtime = (first.folder / "train.bin").stat().st_mtime_ns
    again = prepare(str(src), tokenizer, tmp_path / "prep", quiet=True)
    assert again.folder == first.folder and (again.folder / "train.bin").stat().st_mtime_ns == mtime


def test_batches_are_shifted_windows_and_reproducible(tmp_path):
    src = tmp_path / "story.txt"
    src.write_text(TEXT)
    prepared = prepare(str(src), "char", tmp_path / "prep", quiet=True)
    a = Batches(prepared.splits(8), block_size=8, batch_size=4, device=torch.device("cpu"), seed=3)
    b = Batches(prepared.splits(8), block_size=8, batch_size=4, device=torch.device("cpu"), seed=3)
    xa, ya = a.train()
    xb, yb = b.train()
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert xa.shape == (4, 8) and torch.equal(xa[:, 1:], ya[:, :-1])
    # Evaluation windows are the same every time, whatever training has drawn.
    first = [x for x, _ in a.eval_batches("val", 2)]
    a.train()
    second = [x for x, _ in a.eval_batches("val", 2)]
    assert all(torch.equal(p, q) for p, q in zip(first, second, strict=True))


# --- the prepared cache is checked, not trusted -------------------------------------------------------


def _edit_meta(change):
    def damage(folder):
        meta = json.loads((folder / "meta.json").read_text())
        change(meta)
        (folder / "meta.json").write_text(json.dumps(meta))

    return damage


def _consistent_meta_edit(change):
    """An edit that also fixes meta.json's own checksum: the files must still be checked against it."""
    from data.prepare import _meta_checksum

    def edit(meta):
        change(meta)
        meta["checksum"] = _meta_checksum(meta)

    return _edit_meta(edit)


def _replace(name, make):
    def damage(folder):
        (folder / name).unlink()
        make(folder / name)

    return damage


def _shortened_vocabulary(meta):
    meta["tokenizer"]["chars"] = meta["tokenizer"]["chars"][:5]
    meta["vocab_size"] = 5
    meta["dtype"] = "uint16"


TAMPERING = {
    "emptied": (lambda f: (f / "train.bin").write_bytes(b""), "train.bin has 0 bytes"),
    "truncated": (lambda f: (f / "train.bin").write_bytes((f / "train.bin").read_bytes()[:100]), "has 100 bytes"),
    "odd length": (lambda f: (f / "val.bin").write_bytes((f / "val.bin").read_bytes() + b"x"), "val.bin has"),
    "random bytes": (
        lambda f: (f / "train.bin").write_bytes(os.urandom((f / "train.bin").stat().st_size)),
        "contents of train.bin do not match its checksum",
    ),
    "deleted": (lambda f: (f / "val.bin").unlink(), "val.bin is missing"),
    "a directory": (_replace("train.bin", Path.mkdir), "train.bin is a directory"),
    "a named pipe": (_replace("train.bin", os.mkfifo), "train.bin is not a regular file (a pipe"),
    "the folder a file": (lambda f: (shutil.rmtree(f), f.write_text("x")), "meta.json is missing (a part of its"),
    "meta.json not JSON": (lambda f: (f / "meta.json").write_text("{"), "meta.json is not valid JSON"),
    "meta.json a list": (lambda f: (f / "meta.json").write_text("[]"), "does not hold a JSON object"),
    "meta.json deleted": (lambda f: (f / "meta.json").unlink(), "meta.json is missing"),
    "dtype edited": (_edit_meta(lambda m: m.update(dtype="uint8")), "its checksum does not match"),
    "vocabulary shortened": (_edit_meta(_shortened_vocabulary), "its checksum does not match"),
    # The same edits with meta.json's checksum made to agree: the checks of sizes, dtype and range still catch them.
    "dtype edited, checksum fixed": (
        _consistent_meta_edit(lambda m: m.update(dtype="uint8")),
        "dtype 'uint8' is not 'uint16'",
    ),
    "vocabulary shortened, checksum fixed": (
        _consistent_meta_edit(_shortened_vocabulary),
        "train.bin holds token id 27, outside the vocabulary of 5",
    ),
    "counts edited, checksum fixed": (
        _consistent_meta_edit(lambda m: m.update(train_tokens=10)),
        "train.bin has 5,616 bytes where 10 uint16 tokens take 20",
    ),
    "tokenizer edited, checksum fixed": (
        _consistent_meta_edit(lambda m: m["tokenizer"].update(chars=7)),
        "meta.json is malformed",
    ),
}


@pytest.mark.parametrize("damage,problem", TAMPERING.values(), ids=TAMPERING.keys())
def test_a_tampered_cache_is_rebuilt_from_the_source_saying_why(tmp_path, damage, problem):
    from common.errors import GptwatchWarning
    from tests.commands import TEXT

    src = tmp_path / "story.txt"
    src.write_text(TEXT)
    first = prepare(str(src), "char", tmp_path / "prep", quiet=True)
    good = {p.name: p.read_bytes() for p in first.folder.iterdir()}
    damage(first.folder)
    with pytest.warns(GptwatchWarning) as caught:
        again = prepare(str(src), "char", tmp_path / "prep")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert problem in message and "rebuilding it from" in message and "\n" not in message, message
    assert {p.name: p.read_bytes() for p in again.folder.iterdir()} == good
    assert Batches(again.splits(16), 16, 4, torch.device("cpu"), seed=1).train()[0].shape == (4, 16)


def test_two_preparations_of_the_same_text_at_once_both_succeed(tmp_path, monkeypatch):
    """Another process prepares the same text while this one is staging its own folder: this one finds the
    folder written when it comes to rename its staging folder, uses it, and leaves nothing behind."""
    import subprocess
    import sys

    import data.prepare as p
    from tests.commands import PATIENCE, ROOT, TEXT

    src, data_dir = tmp_path / "story.txt", tmp_path / "prep"
    src.write_text(TEXT)
    other = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from data.prepare import prepare; "
        f"prepare({str(src)!r}, 'char', {str(data_dir)!r}, quiet=True)"
    )
    original = p._meta_checksum

    def the_other_preparation_first(meta):
        monkeypatch.setattr(p, "_meta_checksum", original)
        subprocess.run([sys.executable, "-c", other], check=True, timeout=PATIENCE)
        return original(meta)

    monkeypatch.setattr(p, "_meta_checksum", the_other_preparation_first)
    prepared = prepare(str(src), "char", data_dir, quiet=True)
    assert [path.name for path in data_dir.iterdir()] == [prepared.folder.name]
    assert Batches(prepared.splits(16), 16, 4, torch.device("cpu"), seed=1).train()[0].shape == (4, 16)


def test_a_cache_folder_that_is_a_link_is_rebuilt_without_touching_what_it_points_to(tmp_path):
    from tests.commands import TEXT

    src = tmp_path / "story.txt"
    src.write_text(TEXT)
    folder = prepare(str(src), "char", tmp_path / "prep", quiet=True).folder
    elsewhere = tmp_path / "users-folder"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("mine")
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere)
    with pytest.warns(UserWarning, match="meta.json is missing"):
        prepare(str(src), "char", tmp_path / "prep")
    assert (elsewhere / "notes.txt").read_text() == "mine" and not folder.is_symlink()


# --- text that cannot teach anything -------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,problem",
    [
        (bytes(4000), "holds NUL bytes (the first at byte 0)"),
        (b"abc\x00def" * 100, "the first at byte 3"),
        (b"a", "one kind of token only ('a', once)"),
        (b"zzzz" * 1000, "one kind of token only ('z', 4,000 times)"),
    ],
)
def test_text_that_cannot_teach_anything_is_refused(tmp_path, content, problem):
    from common.errors import UserError

    src = tmp_path / "story.txt"
    src.write_bytes(content)
    with pytest.raises(UserError, match=re.escape(problem)):
        prepare(str(src), "char", tmp_path / "prep", quiet=True)
    assert not (tmp_path / "prep").exists() or not any((tmp_path / "prep").iterdir())


def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path):
    from common.errors import UserError

    pipe = tmp_path / "story.txt"
    os.mkfifo(pipe)
    with pytest.raises(UserError, match="not a regular file"):
        prepare(str(pipe), "char", tmp_path / "prep", quiet=True)


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path):
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text(TEXT)
    marked.write_bytes(b"\xef\xbb\xbf" + TEXT.encode())
    a = prepare(str(plain), "char", tmp_path / "prep", quiet=True)
    b = prepare(str(marked), "char", tmp_path / "prep", quiet=True)
    assert a.tokenizer.to_meta() == b.tokenizer.to_meta() and np.array_equal(a.tokens("train"), b.tokens("train"))


@pytest.mark.parametrize(
    "val_fraction,problem",
    [
        (0.0001, "the val split has 0 tokens"),
        (0.001, "the val split has 3 tokens"),
        (0.999, "the train split has 4 tokens"),
    ],
)
def test_a_split_too_short_names_the_fix_that_works(tmp_path, val_fraction, problem):
    """A long enough text with a bad split is told which --val_fraction to use, and that value works."""
    from common.errors import UserError
    from tests.commands import TEXT

    src = tmp_path / "story.txt"
    src.write_text(TEXT)
    with pytest.raises(UserError) as info:
        prepare(str(src), "char", tmp_path / "prep", val_fraction, quiet=True).splits(16)
    message = str(info.value)
    assert message.startswith(problem) and "longer text" not in message, message
    suggested = float(re.search(r"--val_fraction=([\d.e-]+) or (more|less)", message)[1])
    prepare(str(src), "char", tmp_path / "prep", suggested, quiet=True).splits(16)


class Download:
    """What urllib.request.urlopen returns, for `data` in place of the network."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __enter__(self):
        import io

        return io.BytesIO(self.data)

    def __exit__(self, *exc) -> None:
        pass


def test_a_downloaded_corpus_is_repaired_and_checked_before_it_is_kept(tmp_path, monkeypatch):
    import hashlib
    import urllib.request

    from common.errors import UserError
    from data import corpora

    lower = corpora.CORPORA["tinystories_lower"]
    # UTF-8 read as cp1252, then lower-cased upstream: the quotes and dashes of the original.
    raw = "lily said, \u00e2\u20ac\u0153hi!\u00e2\u20ac and it\u00e2\u20ac\u2122s fun \u00e2\u20ac\u201c yes.\n"
    fixed = 'lily said, "hi!" and it\'s fun - yes.\n'
    corpus = corpora.Corpus(
        "small.txt",
        "https://example.org/small.txt",
        "a small text",
        repairs=lower.repairs,
        sha256=hashlib.sha256(fixed.encode()).hexdigest(),
    )
    monkeypatch.setattr(corpora, "CORPORA", {"small": corpus})
    monkeypatch.setattr(corpora, "SEARCH_DIRS", (tmp_path / "shared",))
    monkeypatch.setattr(corpora, "REPO", tmp_path)
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Download(raw.encode()))
    path = corpora.corpus_path("small")
    assert path == tmp_path / "data" / "downloads" / "small.txt" and path.read_text() == fixed

    path.unlink()
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Download(b"something else\n"))
    with pytest.raises(UserError, match="not the expected text"):
        corpora.corpus_path("small")
    assert not list((tmp_path / "data" / "downloads").iterdir())  # nothing half-kept


def test_the_induction_corpus_is_random_strings_written_twice_and_seeded(tmp_path):
    from data import induction

    text = induction.training_text(seed=0, n_lines=300)
    assert text == induction.training_text(seed=0, n_lines=300) != induction.training_text(seed=1, n_lines=300)
    lines = text.splitlines()
    assert len(lines) == 300
    for line in lines:
        half = len(line) // 2
        assert line[:half] == line[half:] and induction.SHORTEST <= half <= induction.LONGEST
        assert set(line) <= set(induction.ALPHABET)
    # The copy's distance varies, so no fixed offset finds it; spread on a log scale, half the lines are
    # short (at most 6 characters a copy) and some are a single character written twice.
    halves = [len(line) // 2 for line in lines]
    assert len(set(halves)) > 20 and 1 in halves and max(halves) > 24
    assert 0.4 < sum(h <= 6 for h in halves) / len(halves) < 0.6
    prepared = prepare("induction", "char", tmp_path / "prep", corpus_sentences=300, quiet=True)
    assert prepared.meta["source"] == "induction(seed=0, n=300)" and prepared.tokenizer.vocab_size == 63


def test_a_generated_corpus_prepared_before_is_found_without_generating_it_again(tmp_path, monkeypatch):
    from data import pronouns

    first = prepare("pronouns", "char", tmp_path, corpus_sentences=200, quiet=True)

    def generate_again(*args, **kwargs):
        raise AssertionError("the corpus was generated again")

    monkeypatch.setattr(pronouns, "training_text", generate_again)
    again = prepare("pronouns", "char", tmp_path, corpus_sentences=200, quiet=True)
    assert again.folder == first.folder and again.meta == first.meta
    # Another recipe (here, more lines) is not that corpus: it is generated.
    with pytest.raises(AssertionError, match="generated again"):
        prepare("pronouns", "char", tmp_path, corpus_sentences=300, quiet=True)
    # A cache that no longer holds what its meta.json promises is not used either.
    (first.folder / "train.bin").write_bytes(b"\x00\x01")
    with pytest.raises(AssertionError, match="generated again"):
        prepare("pronouns", "char", tmp_path, corpus_sentences=200, quiet=True)


def test_a_generated_corpus_prepared_with_a_models_vocabulary_is_not_found_for_its_own(tmp_path):
    """The folder of a fine-tune's data ("pronouns-char-<vocabulary>-...") also matches the search for the
    corpus's own char vocabulary ("pronouns-char-*"): it is found for that model's vocabulary only."""
    from data.prepare import ModelVocabulary

    vocabulary = ModelVocabulary(CharTokenizer.from_text(TEXT + "abcdefghijklmnopqrstuvwxyz ,XYZ"), "m")
    theirs = prepare("pronouns", vocabulary, tmp_path, corpus_sentences=200, quiet=True)
    own = prepare("pronouns", "char", tmp_path, corpus_sentences=200, quiet=True)
    assert own.folder != theirs.folder and own.tokenizer.to_meta() != theirs.tokenizer.to_meta()
    assert prepare("pronouns", vocabulary, tmp_path, corpus_sentences=200, quiet=True).folder == theirs.folder
