"""The one way from a checkpoint to a model and its tokenizer: `load_model`, which sampling, export,
inspection and the benchmarks call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from checkpoints.read import CheckpointError, checkpoint_path, load_checkpoint, load_weights, validate
from data.tokenizer import Tokenizer, TokenizerMetaError, tokenizer_from_meta
from errors import is_out_of_memory
from model.gpt import GPT


@dataclass
class Loaded:
    """A checkpoint made usable: the model in eval mode on its device, its tokenizer, and the
    checkpoint's other contents (step, configs, run name)."""

    model: GPT
    tokenizer: Tokenizer
    checkpoint: dict


def load_model(path: str | Path, device: torch.device) -> Loaded:
    """The one way from a checkpoint file (or the folder holding ckpt.pt) to a model and its tokenizer."""
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
