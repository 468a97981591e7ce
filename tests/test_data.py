"""Tokenizers, preparation into token files, and batches."""

import json

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
    a = Batches(prepared, block_size=8, batch_size=4, device=torch.device("cpu"), seed=3)
    b = Batches(prepared, block_size=8, batch_size=4, device=torch.device("cpu"), seed=3)
    xa, ya = a.train()
    xb, yb = b.train()
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert xa.shape == (4, 8) and torch.equal(xa[:, 1:], ya[:, :-1])
    # Evaluation windows are the same every time, whatever training has drawn.
    first = [x for x, _ in a.eval_batches("val", 2)]
    a.train()
    second = [x for x, _ in a.eval_batches("val", 2)]
    assert all(torch.equal(p, q) for p, q in zip(first, second, strict=True))
