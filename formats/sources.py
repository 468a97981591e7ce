"""Where a model comes from, said once. `FORMATS` registers every file format gptwatch reads or writes, each a
`Format` record of its own module; `identify` turns a path or name into a `Source` (a file or folder one of them
recognises, or the name of a model on the Hugging Face hub, fetched once into the Hugging Face cache), and
`load_model` reads any source into a gptwatch model that computes the same function.

A checkpoint file is read once, when it is identified (a nanoGPT checkpoint and gptwatch's are both `ckpt.pt`:
its contents tell them apart). Each model is refused in one line, before anything large is read, downloaded or
allocated, when gptwatch's model cannot compute it exactly or it cannot fit in memory.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.errors import UsageError, warn
from common.files import read_head
from formats.checkpoint import CHECKPOINT, GPTWATCH, ZIP_MAGIC, checkpoint_path, read_torch
from formats.format import CheckpointError, Loaded, Source
from formats.huggingface import CONFIG, HUB_MODELS, HUGGINGFACE, LOCAL_FOLDER_HELP, hub_name
from formats.nanogpt import NANOGPT
from formats.transformerlens import TRANSFORMERLENS

# Every format, in the order `identify` asks them what a folder or a file is: gptwatch's checkpoint last, as it
# takes any file the others leave (its reader then says what is wrong with it).
FORMATS = (HUGGINGFACE, NANOGPT, TRANSFORMERLENS, GPTWATCH)
TARGETS = {known.target: known for known in FORMATS if known.target is not None}  # by the name --export gives


def identify(source: str | Path, *, model: bool = True) -> Source:
    """What `source` names: given as a model (`model`, as --init_from gives one), maybe a hub model; given as a path
    (as --out_dir gives one), anything that is no model file of another kind is taken for a gptwatch checkpoint,
    whose reader says what is wrong with it. Reads at most a checkpoint file (memory-mapped), never downloads."""
    path = Path(source)
    name = hub_name(str(source)) if model else None
    if model and not path.exists():
        if name is not None:
            return Source(HUGGINGFACE, hub=name)
        raise CheckpointError(
            f"{source} is neither a file or folder here nor a model gptwatch fetches from the "
            f"Hugging Face hub ({', '.join(HUB_MODELS)}); give a gptwatch or nanoGPT ckpt.pt "
            f"(or the folder holding it), {LOCAL_FOLDER_HELP}"
        )
    if name is not None:
        warn(
            f"reading the local {'folder' if path.is_dir() else 'file'} {path}, not the hub model {name} of the "
            f"same name; to fetch that one, give its repository, {HUB_MODELS[name][0]}"
        )
    if path.is_dir():
        found = next((known for known in FORMATS if known.is_folder_of is not None and known.is_folder_of(path)), None)
        if found is not None:
            return Source(found, path)
        if model and not (path / CHECKPOINT).exists():
            raise CheckpointError(
                f"{path} holds neither {CONFIG} (a Hugging Face model's folder) nor {CHECKPOINT} "
                f"(a gptwatch or nanoGPT checkpoint); give one of those, or the file itself"
            )
    file = checkpoint_path(path)  # the path is kept as given: a reader names what is wrong there (a folder as ckpt.pt)
    contents = read_torch(file) if file.is_file() and read_head(file).startswith(ZIP_MAGIC) else None
    found = next(known for known in FORMATS if known.is_file_of is not None and known.is_file_of(file, contents))
    return Source(found, path, contents=contents)


def load_model(
    source: str | Path | Source, device: torch.device, *, block_size: int | None = None, dropout: float | None = None
) -> Loaded:
    """The model `source` gives (a `Source`, or a path here), on `device` in eval mode, with its tokenizer; with
    `block_size`, cropped to that many positions. A model trained elsewhere is described as a checkpoint would be,
    what was read under "imported"."""
    found = source if isinstance(source, Source) else identify(source, model=False)
    loaded = found.format.load(found, device, dropout)
    if block_size is not None and block_size != loaded.model.config.block_size:
        positions = loaded.model.config.block_size
        if block_size > positions:
            raise UsageError(
                f"block_size={block_size} is above the {positions} positions of {found.hub or found.path}"
                f"; use --block_size={positions} or less"
            )
        loaded.model.crop_block_size(block_size)
        loaded.checkpoint["model_config"] = loaded.model.config.to_dict()
    return loaded


def model_name(source: str) -> str:
    """What a model given by path or name is called: a hub name as it is, else the name of its folder."""
    path = Path(source)
    if hub_name(source) is not None and not path.exists():
        return hub_name(source)
    path = path.resolve()
    return path.parent.name if path.is_file() else path.name


def describe(loaded: Loaded) -> str:
    """One line saying what a model trained elsewhere is, e.g. "nanoGPT checkpoint out/ckpt.pt (iteration 5000):
    6 layers x 6 heads, 384 wide, 256 positions, char vocabulary of 65 tokens"."""
    cfg, record, tokenizer = loaded.model.config, loaded.checkpoint["imported"], loaded.tokenizer
    what = next(known for known in FORMATS if known.name == record["format"]).describe(record)
    return (
        f"{what}: {cfg.n_layer} layers x {cfg.n_head} heads, {cfg.n_embd} wide, {cfg.block_size} positions, "
        f"{tokenizer.name} vocabulary of {tokenizer.vocab_size:,} tokens"
    )
