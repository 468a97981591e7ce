"""A Hugging Face tokenizer (a `tokenizers` model saved with the folder) that gives gptwatch's own ids,
so `AutoTokenizer.from_pretrained(folder)` and the model in the same folder agree.

The mapping, for each gptwatch tokenizer:

- `char`: a BPE model with no merges: each character is its own token, at gptwatch's id; no
  normalizer and no pre-tokenizer, so spaces and newlines are tokens like any other. A character
  gptwatch does not know (it raises) becomes `<unk>`, whose id is `vocab_size`: one past the model's
  vocabulary, so the model refuses it rather than reading some other character.
- `gpt2` (GPT-2's BPE compacted to the corpus's tokens): tiktoken's r50k_base rebuilt as a byte-level
  BPE, every token renumbered: the corpus's tokens to their compact ids (`kept_ids`), end-of-text
  included, and every other r50k token to an id from `vocab_size` on. Text gptwatch encodes gets
  the same ids; text with a token the corpus never had (gptwatch raises) gets an id the model
  refuses. Padding ids (between the kept tokens and `vocab_size`) belong to no text.

Exactness of the rebuilt BPE: tiktoken merges, in each piece of its regular expression, the adjacent
pair whose concatenation has the lowest rank, and takes a whole piece that is a token as it is. The
`tokenizers` BPE does the same with `ignore_merges=True` and a merge for every way a token splits into
two tokens, ranked by the token it makes; the pre-tokenizer is r50k's regular expression, then
GPT-2's byte-to-character table without its own splitting.
"""

from __future__ import annotations

from functools import cache

import formats.optional as optional
from data.tokenizer import EOT, CharTokenizer, GPT2Tokenizer, Tokenizer

UNK = "<unk>"


def hf_tokenizer(tokenizer: Tokenizer):
    """A `transformers` fast tokenizer giving `tokenizer`'s ids (see the module docstring)."""
    transformers = optional.transformers("a Hugging Face tokenizer")
    if isinstance(tokenizer, CharTokenizer):
        # `<unk>` stays the BPE model's own: declared to transformers it would become an added token,
        # matched in text, where gptwatch reads "<unk>" as five characters.
        return transformers.PreTrainedTokenizerFast(tokenizer_object=char_backend(tokenizer.chars),
                                                    clean_up_tokenization_spaces=False)
    if isinstance(tokenizer, GPT2Tokenizer):
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=gpt2_backend(tokenizer), eos_token=EOT, bos_token=EOT, pad_token=EOT,
            clean_up_tokenization_spaces=False)
    raise ValueError(f"no Hugging Face tokenizer for gptwatch's {getattr(tokenizer, 'name', tokenizer)!r}")


def char_backend(chars: str):
    """Each character its own token at its position in `chars`; `<unk>` at len(chars)."""
    tokenizers = optional.tokenizers()
    vocab = {c: i for i, c in enumerate(chars)}
    vocab[UNK] = len(chars)
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token=UNK, fuse_unk=False))
    backend.decoder = tokenizers.decoders.Fuse()  # characters joined as they are, no spaces between
    return backend


@cache
def byte_characters() -> tuple[str, ...]:
    """GPT-2's printable stand-in for each byte 0..255: printable Latin-1 bytes stand for themselves,
    the rest for the characters from U+0100 on, in byte order (so a BPE over strings can hold bytes)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return tuple(out[b] for b in range(256))


def gpt2_backend(tokenizer: GPT2Tokenizer):
    """r50k_base as a `tokenizers` byte-level BPE, renumbered to `tokenizer`'s compact ids."""
    tokenizers = optional.tokenizers()
    enc = tokenizer.enc
    table = byte_characters()

    def text(token: bytes) -> str:
        return "".join(table[b] for b in token)

    eot = enc.eot_token
    ranks = {enc.decode_single_token_bytes(rank): rank for rank in range(enc.n_vocab) if rank != eot}
    compact = {orig: i for i, orig in enumerate(tokenizer.kept_ids)}
    unseen = iter(range(tokenizer.vocab_size, tokenizer.vocab_size + enc.n_vocab))
    vocab, merges = {}, []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        vocab[text(token)] = compact[rank] if rank in compact else next(unseen)
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges += [(text(a), text(b)) for a, b in sorted(splits, key=lambda ab: (ranks[ab[0]], ranks[ab[1]]))]
    vocab[EOT] = compact[eot]
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                                                         ignore_merges=True))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        # r50k's own regular expression: tiktoken keeps it only as this attribute
        tokenizers.pre_tokenizers.Split(tokenizers.Regex(enc._pat_str), behavior="isolated"),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = tokenizers.decoders.ByteLevel()
    # Matched whole wherever it is written, as gptwatch's tokenizer allows it, at its compact id.
    backend.add_special_tokens([tokenizers.AddedToken(EOT, special=True, normalized=False)])
    return backend
