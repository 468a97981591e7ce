"""Properties over generated inputs: tokenizers round-trip what they can express
and name what they cannot; the config parser fails only with UsageError."""

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.harness import load_config
from common.errors import UsageError
from common.settings import FIELDS, TrainConfig, read_toml
from data.tokenizer import EOT, CharTokenizer, GPT2Tokenizer, TokenizerError

FEW = settings(max_examples=30, deadline=None)
MANY = settings(max_examples=150, deadline=None)

# Text from a small alphabet shares characters and BPE tokens often; arbitrary text rarely does.
corpus_like = st.text(alphabet=st.sampled_from("the dog cat saw .\nÉé"), max_size=60)
texts = st.one_of(corpus_like, st.text(max_size=60))


# --- tokenizers -------------------------------------------------------------------------------------------


@FEW
@given(texts)
def test_char_tokenizer_round_trips_its_corpus(text):
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


@FEW
@given(texts, texts)
def test_char_tokenizer_refuses_exactly_the_unseen_characters(corpus, other):
    tok = CharTokenizer.from_text(corpus)
    unseen = sorted(set(other) - set(corpus))
    if not unseen:
        assert tok.decode(tok.encode(other)) == other
        return
    with pytest.raises(TokenizerError) as info:
        tok.encode(other)
    assert f"{len(unseen)} character(s)" in str(info.value) and repr(unseen[0]) in str(info.value)


@FEW
@given(texts)
def test_gpt2_tokenizer_round_trips_its_corpus(text):
    tok = GPT2Tokenizer.from_text(text)
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids) and tok.vocab_size % 64 == 0
    assert tok.decode(ids) == text


@FEW
@given(texts, texts)
def test_gpt2_tokenizer_refuses_exactly_the_unseen_tokens(corpus, other):
    tok = GPT2Tokenizer.from_text(corpus)
    unseen = set(tok.enc.encode(other, allowed_special={EOT}, disallowed_special=())) - set(tok.kept_ids)
    if not unseen:
        assert tok.decode(tok.encode(other)) == other
        return
    with pytest.raises(TokenizerError, match=rf"^{len(unseen)} token\(s\) never seen in the training corpus"):
        tok.encode(other)


# --- config ------------------------------------------------------------------------------------------------

keys = st.one_of(st.sampled_from(sorted(FIELDS)), st.text(max_size=12))
cli_values = st.one_of(
    st.text(max_size=20),
    st.integers().map(str),
    st.floats().map(str),
    st.sampled_from(
        [
            "",
            "true",
            "no",
            "[]",
            '["a", "b"]',
            "[1, 2]",
            "[",
            "nan",
            "-inf",
            "1e400",
            "0",
            "-3",
            "1_000",
            "0x10",
            "char",
            "gpt2",
            "cpu",
            "modern",
            "muon",
        ]
    ),
)
cli_args = st.one_of(
    st.builds(lambda k, sep, v: f"--{k}{sep}{v}", keys, st.sampled_from(["=", ""]), cli_values), st.text(max_size=20)
)


@MANY
@given(st.lists(cli_args, max_size=6))
def test_command_line_overrides_fail_only_with_usage_error(args):
    try:
        cfg = load_config(None, args)
    except UsageError:
        return
    assert isinstance(cfg, TrainConfig)


def _toml_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # close to a TOML basic string; the rare misses are bad TOML
    return "[" + ", ".join(_toml_literal(v) for v in value) + "]"


toml_values = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.text(max_size=8), max_size=3),
    st.lists(st.integers(), max_size=3),
)
toml_documents = st.one_of(
    st.dictionaries(keys, toml_values, max_size=6).map(
        lambda d: "".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml_literal(v)}\n" for k, v in d.items())
    ),
    st.text(max_size=80),
    st.binary(max_size=80),
)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return tmp_path_factory.mktemp("toml") / "generated.toml"


@MANY
@given(document=toml_documents)
def test_config_files_fail_only_with_usage_error(config_file, document):
    if isinstance(document, str):
        config_file.write_text(document, encoding="utf-8")
    else:
        config_file.write_bytes(document)
    try:
        values = read_toml(config_file)
    except UsageError:
        return
    for key, value in values.items():  # what gets through has the field's type
        default = FIELDS[key].default
        assert type(value) is (list if default is dataclasses.MISSING else type(default)), (key, value)
    try:
        load_config(config_file, [])
    except UsageError:
        pass


# --- a long text is encoded piece by piece, to the same tokens ---------------------------------------------------

PIECE_ALPHABET = [*"ab \n\t.,'x\u00a0\u3000\r½²éÉ_9ßΩ日本-—", "'s", "'ll", "<|endoftext|>", "  ", "\n\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECE_ALPHABET), max_size=200), st.integers(1, 8))
def test_gpt2_tokens_of_the_pieces_are_the_tokens_of_the_text(parts, size):
    """`pieces` cuts a text only where GPT-2's BPE joins no token across the cut (data/tokenizer.py), so a long
    text is tokenized a piece at a time, in bounded memory, to exactly its own tokens."""
    from conftest import require_gpt2

    from data.tokenizer import BPE_CUTS, _original_ids, gpt2_encoding, pieces

    require_gpt2()
    text = "".join(parts)
    enc = gpt2_encoding()
    assert [i for piece in pieces(text, BPE_CUTS, size) for i in _original_ids(enc, piece)] == _original_ids(enc, text)
    assert "".join(pieces(text, BPE_CUTS, size)) == text


@given(st.text(max_size=300), st.integers(1, 50))
def test_a_text_in_pieces_is_the_text(text, size):
    from data.tokenizer import pieces

    found = list(pieces(text, size=size))
    assert "".join(found) == text and all(len(piece) <= size for piece in found)
