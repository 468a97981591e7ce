"""A gptwatch checkpoint made usable: `Loaded` (the model, its tokenizer and the checkpoint's other contents),
which `load_model` gives for every model it reads, and `load_gptwatch`, which reads the checkpoints train.py
writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cli import is_out_of_memory
from data.tokenizer import Tokenizer, TokenizerMetaError, tokenizer_from_meta
from formats.read import CheckpointError, checkpoint_path, load_checkpoint, load_weights, validate
from model.config import GPTConfig
from model.gpt import GPT
from model.memory import parameter_count, shortfall, size_text


@dataclass
class Loaded:
    """A checkpoint made usable: the model in eval mode on its device, its tokenizer, and the
    checkpoint's other contents (step, configs, run name; for a model trained elsewhere, its model_config,
    tokenizer and what was read, under "imported")."""

    model: GPT
    tokenizer: Tokenizer
    checkpoint: dict


def load_gptwatch(path: str | Path, device: torch.device) -> Loaded:
    """A checkpoint train.py wrote (the file, or the folder holding ckpt.pt) as a model and its tokenizer."""
    checkpoint = load_checkpoint(path)
    path = checkpoint_path(path)  # the file, for messages
    config = validate(checkpoint, path)
    try:
        tokenizer = tokenizer_from_meta(checkpoint["tokenizer"])
    except TokenizerMetaError as exc:  # others (GPT-2's BPE not loadable here) are not the checkpoint's fault
        raise CheckpointError(f"{path} holds no usable tokenizer ({exc}); use the ckpt.pt that train.py wrote") \
            from None
    tokens = config.vocab_used or config.vocab_size   # the rows beyond vocab_used pad the vocabulary
    if tokenizer.vocab_size != tokens:
        raise CheckpointError(f"{path}: its tokenizer has {tokenizer.vocab_size} tokens but its model_config "
                              f"{tokens}; use the ckpt.pt that train.py wrote")
    _check_fits(config, device, path)
    try:
        model = GPT(config)
        load_weights(model, checkpoint["model"], path)
        model.to(device).eval()
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        raise CheckpointError(f"{path}: its model ({config.to_dict()}) does not fit in the memory of {device} "
                              f"here; use --device=cpu, or a machine with more memory") from None
    return Loaded(model, tokenizer, checkpoint)


def load_bytes(config: GPTConfig) -> dict[str, int]:
    """A lower bound of what loading `config`'s model and sampling from it allocate besides the checkpoint's
    own tensors: the model's float32 weights, the rotary tables of "modern" (block_size rows a layer), and the
    cache sampling fills (block_size keys and values a layer). The last two follow from block_size alone, which
    no tensor of a "modern" checkpoint holds."""
    return {"weights": 4 * parameter_count(config),
            "rotary tables": 4 * config.n_layer * config.block_size * config.head_dim if config.modern else 0,
            "sampling cache": 4 * config.n_layer * config.block_size * 2 * config.n_embd}


def _check_fits(config: GPTConfig, device: torch.device, path: Path) -> None:
    """`CheckpointError` before anything is allocated when the model the checkpoint describes cannot fit in
    the memory of `device` (or of the CPU, where it is built first)."""
    need = load_bytes(config)
    for where in dict.fromkeys([torch.device("cpu"), device]):
        counted = need if where == device else {k: n for k, n in need.items() if k != "sampling cache"}
        total = sum(counted.values())
        free = shortfall(total, where)
        if free is not None:
            parts = ", ".join(f"{what} {size_text(n)}" for what, n in counted.items() if n)
            raise CheckpointError(f"{path}: its model (block_size {config.block_size:,}, n_layer {config.n_layer}, "
                                  f"n_embd {config.n_embd}) needs at least {size_text(total)} of memory on "
                                  f"{where.type} ({parts}), and {size_text(free)} is free; use a machine with more "
                                  f"memory, or the ckpt.pt that train.py wrote if this one was edited")
