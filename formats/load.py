"""The one way from a path or name to a model and its tokenizer: `load_model`, which sampling, export,
inspection and the benchmarks call. It reads a checkpoint train.py wrote (`formats.gptwatch`) and every
model trained elsewhere that `formats.foreign` reads: a Hugging Face GPT-2-family folder or hub name, a
nanoGPT checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from cli import UsageError
from formats.foreign import CHECKPOINT, GPTWATCH, Source, identify, load_foreign
from formats.gpt2 import CONFIG
from formats.gptwatch import Loaded, load_gptwatch
from formats.hub import hub_name


def load_model(source: str | Path | Source, device: torch.device, *, block_size: int | None = None,
               hub: bool = True) -> Loaded:
    """The model `source` gives, on `device` in eval mode, with its tokenizer: a gptwatch checkpoint (the file,
    or the folder holding ckpt.pt), or a model trained elsewhere (see `formats.foreign`), given by path or
    name (`hub=False`: a path here, never a hub name) or as `identify` found it. With `block_size`, cropped to
    that many positions.

    A path that is not there and names no hub model, or a folder holding neither a model nor a checkpoint, is
    taken for a gptwatch checkpoint not written yet, and refused as one ("checkpoint ... not found"); `identify`
    says instead what a name given as a model could have been."""
    found = source if isinstance(source, Source) else _found(source, hub)
    loaded = load_gptwatch(found.path, device) if found.kind == GPTWATCH else load_foreign(found, device)
    if block_size is not None and block_size != loaded.model.config.block_size:
        positions = loaded.model.config.block_size
        if block_size > positions:
            raise UsageError(f"block_size={block_size} is above the {positions} positions of {found.hub or found.path}"
                             f"; use --block_size={positions} or less")
        loaded.model.crop_block_size(block_size)
        loaded.checkpoint["model_config"] = loaded.model.config.to_dict()
    return loaded


def _found(source: str | Path, hub: bool) -> Source:
    path = Path(source)
    if path.is_dir():
        readable = (path / CONFIG).is_file() or (path / CHECKPOINT).exists()
    else:
        readable = path.exists() or (hub and hub_name(str(source)) is not None)
    return identify(source, hub=hub) if readable else Source(GPTWATCH, path)
