"""nanoGPT checkpoints: the `ckpt.pt` its train.py writes, with the character vocabulary of its `meta.pkl` when it
has one (else GPT-2's BPE), read into a gptwatch model that computes the same function. nanoGPT saves only tensors
and plain values, so `torch.load(weights_only=True)` reads it; its MLP uses the exact GELU, as gptwatch's does.
Its file is named as gptwatch's is, ckpt.pt: what it holds tells them apart (`NANOGPT.is_file_of`).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch

from common.files import read_bytes
from data.tokenizer import CharTokenizer, TokenizerMetaError
from formats.checkpoint import checkpoint_path
from formats.format import CheckpointError, Format, Loaded, Parts, Source, config_from, gpt2_bpe, imported
from formats.layout import read_state
from model.config import GPTConfig

META = "meta.pkl"
SIZES = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")  # model_args that give the shapes
VOCABULARY_KEYS = ("vocab_size", "itos", "stoi")  # what nanoGPT's prepare.py writes
USE_CHECKPOINT, USE_META = "use the ckpt.pt nanoGPT's train.py wrote", "use the meta.pkl nanoGPT's prepare.py wrote"


def meta_places(path: Path, checkpoint: dict) -> list[Path]:
    """Where a checkpoint's meta.pkl may be: beside it, then where nanoGPT's sample.py finds it."""
    places = [path.parent / META]
    config = checkpoint.get("config")
    dataset = config.get("dataset") if isinstance(config, dict) else None
    if isinstance(dataset, str) and dataset.strip(".") and Path(dataset).name == dataset:  # a plain name: no '..'
        places.append(path.parent.parent / "data" / dataset / META)
    return places


class _Refused(pickle.UnpicklingError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Builds what a pickle can describe without naming a class or function, so nothing in the file runs."""

    def find_class(self, module: str, name: str):
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid):
        raise _Refused("a persistent reference")


def read_meta(path: Path) -> CharTokenizer:
    """The char tokenizer of a nanoGPT meta.pkl ({vocab_size, itos, stoi})."""
    data = read_bytes(path, "vocabulary", "give the meta.pkl nanoGPT's prepare.py wrote", CheckpointError)
    try:
        meta = _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise CheckpointError(
            f"refusing {path}: it holds a pickled Python object ({exc}), not only a vocabulary "
            f"of strings and numbers; nothing in it was run. Use the meta.pkl nanoGPT's "
            f"prepare.py wrote"
        ) from None
    except Exception as exc:  # a damaged pickle surfaces as many types (EOFError, UnpicklingError, ValueError, ...)
        raise CheckpointError(f"{path} is not a readable pickle ({type(exc).__name__}); {USE_META}") from None
    extra = sorted(map(repr, set(meta) - set(VOCABULARY_KEYS))) if isinstance(meta, dict) else None
    if extra is None or extra:
        found = f"the keys {', '.join(extra)}" if extra else f"a {type(meta).__name__}"
        raise CheckpointError(f"{path} holds {found}, not a vocabulary ({', '.join(VOCABULARY_KEYS)}); {USE_META}")
    try:
        tokenizer = CharTokenizer.from_stoi_itos(meta.get("stoi"), meta.get("itos"))
    except TokenizerMetaError as exc:
        raise CheckpointError(f"{path} holds no usable vocabulary ({exc}); {USE_META}") from None
    if "vocab_size" in meta and (type(meta["vocab_size"]) is not int or meta["vocab_size"] != tokenizer.vocab_size):
        raise CheckpointError(
            f"{path} says vocab_size={meta['vocab_size']!r} but holds {tokenizer.vocab_size:,} characters; {USE_META}"
        )
    return tokenizer


def is_nanogpt(path: Path, contents: object) -> bool:
    """Whether a PyTorch file holds what nanoGPT's train.py saves: its weights and sizes, and no gptwatch format."""
    return isinstance(contents, dict) and "model_args" in contents and "model" in contents and "format" not in contents


def load(source: Source, device: torch.device, dropout: float | None) -> Loaded:
    path = checkpoint_path(source.path)
    return imported(f"the model in {path}", read_nanogpt(path, source.contents), device, dropout)


def read_nanogpt(path: Path, checkpoint: dict) -> Parts:
    """A nanoGPT checkpoint, read: (its gptwatch config, tokenizer, weights(config) -> state dict, what was read)."""
    args = checkpoint["model_args"]
    if not isinstance(args, dict):
        raise CheckpointError(f"{path}: its model_args is not a dict of the model's sizes; {USE_CHECKPOINT}")
    for key in SIZES:
        if type(args.get(key)) is not int or args[key] <= 0:
            raise CheckpointError(
                f"{path}: its model_args has no positive integer {key!r} (found {args.get(key)!r}); {USE_CHECKPOINT}"
            )
    if not isinstance(args.get("bias"), bool):
        raise CheckpointError(f"{path}: its model_args has no 'bias' (true or false); {USE_CHECKPOINT}")
    # `bias` puts biases everywhere, the query/key/value projection included
    config = config_from(path, **{key: args[key] for key in SIZES}, bias=args["bias"], qkv_bias=args["bias"])
    places = meta_places(path, checkpoint)
    meta = next((place for place in places if place.exists()), None)
    if meta is not None:
        tokenizer = read_meta(meta)
        if tokenizer.vocab_size != config.vocab_size:
            raise CheckpointError(
                f"{meta} holds {tokenizer.vocab_size:,} characters, but the model in {path} has "
                f"{config.vocab_size:,} token rows: it is the vocabulary of another dataset; "
                f"put the meta.pkl of the checkpoint's dataset beside it"
            )
    else:
        tokenizer = gpt2_bpe(
            config,
            lambda _: (
                f"the model in {path} has {config.vocab_size:,} token rows, too few "
                f"for GPT-2's BPE, and it has no meta.pkl (looked at {' and '.join(map(str, places))}); "
                f"put the meta.pkl of its dataset beside it"
            ),
        )

    def weights(config: GPTConfig) -> dict[str, torch.Tensor]:
        refusal = f"{path}: its 'model' is not a state dict (named tensors); {USE_CHECKPOINT}"
        return read_state(checkpoint["model"], config, False, str(path), refusal)

    best = checkpoint.get("best_val_loss")  # a number, or a tensor holding one (nanoGPT saves its best loss so)
    number = isinstance(best, (int, float)) and not isinstance(best, bool)
    source = {
        "format": NANOGPT.name,
        "path": str(path),
        "meta": None if meta is None else str(meta),
        "iter_num": checkpoint["iter_num"] if type(checkpoint.get("iter_num")) is int else None,
        "best_val_loss": float(best) if number or isinstance(best, torch.Tensor) and best.numel() == 1 else None,
    }
    return config, tokenizer, weights, source


def describe(record: dict) -> str:
    iteration = record.get("iter_num")
    return f"nanoGPT checkpoint {record['path']}" + (f" (iteration {iteration})" if iteration is not None else "")


NANOGPT = Format("nanogpt", "nanoGPT", elsewhere=True, is_file_of=is_nanogpt, load=load, describe=describe)
