"""Models trained elsewhere: what a path or name given as a model is, and reading it into a gptwatch model
that computes the same function, with its tokenizer.

- a folder holding `config.json`: a Hugging Face GPT-2-family model (`formats.gpt2`);
- a hub name (`gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`, `distilgpt2`, or its repository, such as
  `openai-community/gpt2`): fetched once into the Hugging Face cache, then read as a folder
  (`formats.hub`). A file or folder here of the same name wins, with a warning saying so;
- a `ckpt.pt` in nanoGPT's layout, or the folder holding it: a nanoGPT checkpoint (`formats.nanogpt`);
- any other file, or folder holding a `ckpt.pt`: a gptwatch checkpoint, read by `formats.gptwatch` (also a
  damaged one, whose problem its messages name).

`load_foreign` reads each model trained elsewhere into a `Loaded`, as `load_gptwatch` reads a gptwatch
checkpoint; `load_model` (`formats.load`) calls whichever `identify` says; `describe` says in one line what a
model trained elsewhere is.

Each is refused in one line, before anything large is read or allocated, when gptwatch's model cannot
compute it exactly or it cannot fit in memory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from cli import warn
from data.tokenizer import Tokenizer
from formats.gpt2 import CONFIG, folder_tokenizer, gpt_config, read_hf_config, read_hf_weights, weights_path
from formats.gptwatch import Loaded
from formats.hub import HUB_MODELS, LOCAL_FOLDER_HELP, fetch, hub_name
from formats.layout import ForeignModelError, built, check_fits, read_weights
from formats.nanogpt import is_nanogpt, nanogpt_config, nanogpt_tokenizer, nanogpt_weights
from formats.read import ZIP_MAGIC
from formats.torchfile import load_torch_file
from model.config import GPTConfig
from model.gpt import GPT

GPTWATCH, NANOGPT, HUGGINGFACE = "gptwatch", "nanogpt", "huggingface"
CHECKPOINT = "ckpt.pt"


@dataclass(frozen=True)
class Source:
    """What a model given by path or name is: its `kind`, and where it is (`path`: a folder or checkpoint file;
    None for a hub model not fetched yet, named `hub`). A nanoGPT checkpoint's `contents` are read once."""

    kind: str
    path: Path | None
    hub: str | None = None
    contents: dict | None = None


def identify(source: str | Path, *, hub: bool = True) -> Source:
    """What `source` names (see the module docstring; `hub=False`: a path here, never a hub name). Reads at
    most a candidate nanoGPT checkpoint (memory-mapped), never downloads."""
    path = Path(source)
    name = hub_name(str(source)) if hub else None
    if not path.exists():
        if name is None:
            raise ForeignModelError(f"{source} is neither a file or folder here nor a model gptwatch fetches from the "
                                    f"Hugging Face hub ({', '.join(HUB_MODELS)}); give a gptwatch or nanoGPT ckpt.pt "
                                    f"(or the folder holding it), {LOCAL_FOLDER_HELP}")
        return Source(HUGGINGFACE, None, hub=name)
    if name is not None:
        warn(f"reading the local {'folder' if path.is_dir() else 'file'} {path}, not the hub model {name} of the "
             f"same name; to fetch that one, give its repository, {HUB_MODELS[name][0]}")
    given = path
    if path.is_dir():
        if (path / CONFIG).is_file():
            return Source(HUGGINGFACE, path)
        if not (path / CHECKPOINT).exists():
            raise ForeignModelError(f"{path} holds neither {CONFIG} (a Hugging Face model's folder) nor {CHECKPOINT} "
                                    f"(a gptwatch or nanoGPT checkpoint); give one of those, or the file itself")
        path = path / CHECKPOINT
    contents = _nanogpt_contents(path)
    # a gptwatch checkpoint keeps the path as given: its reader names what is wrong there (a folder as ckpt.pt)
    return Source(NANOGPT, path, contents=contents) if contents is not None else Source(GPTWATCH, given)


def _nanogpt_contents(path: Path) -> dict | None:
    """The contents of `path` when it is a nanoGPT checkpoint; None for anything else (a gptwatch checkpoint, a
    damaged file: `load_gptwatch` names the problem)."""
    try:
        with path.open("rb") as fh:
            if fh.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
                return None
        contents = load_torch_file(path, "checkpoint")
    except (OSError, ForeignModelError):
        return None
    return contents if is_nanogpt(contents) else None


def load_foreign(found: Source, device: torch.device) -> Loaded:
    """The model trained elsewhere that `found` describes (`identify`), as a gptwatch model on `device` computing
    the same function, with its tokenizer. `Loaded.checkpoint` describes it as a checkpoint would (model_config,
    tokenizer) and says what was read under "imported" (plain values: "format", "path" and each format's
    details)."""
    if found.kind == NANOGPT:
        return _read_nanogpt(found.path, found.contents, device)
    if found.kind == HUGGINGFACE:
        folder = found.path if found.path is not None else fetch(found.hub, device)
        return _read_hf(folder, found.hub, device)
    raise ValueError(f"{found.path} is a gptwatch checkpoint: load_gptwatch reads it")


def describe(loaded: Loaded) -> str:
    """One line saying what a model trained elsewhere is, e.g. "nanoGPT checkpoint out/ckpt.pt (iteration 5000):
    6 layers x 6 heads, 384 wide, 256 positions, char vocabulary of 65 tokens"."""
    cfg, source, tokenizer = loaded.model.config, loaded.checkpoint["imported"], loaded.tokenizer
    if source["format"] == NANOGPT:
        iteration = source.get("iter_num")
        what = f"nanoGPT checkpoint {source['path']}" + (f" (iteration {iteration})" if iteration is not None else "")
    else:
        where = f"{source['hub']} ({source['path']})" if source.get("hub") else source["path"]
        what = f"Hugging Face {source['class']} {where}"
    return (f"{what}: {cfg.n_layer} layers x {cfg.n_head} heads, {cfg.n_embd} wide, {cfg.block_size} positions, "
            f"{tokenizer.name} vocabulary of {tokenizer.vocab_size:,} tokens")


def _read_hf(folder: Path, hub: str | None, device: torch.device) -> Loaded:
    hf = read_hf_config(folder)
    what = hub or f"the model in {folder}"
    saved = gpt_config(hf, folder / CONFIG)
    tokenizer = folder_tokenizer(folder, saved)
    config = _with_padding(saved, tokenizer, what)
    check_fits(config, what, device)
    model = built(config, read_hf_weights(folder, config), device)
    source = {"format": HUGGINGFACE, "path": str(folder), "hub": hub, "weights": weights_path(folder).name,
              "class": (hf.get("architectures") or ["GPT2LMHeadModel"])[0]}
    return _loaded(model, tokenizer, source)


def _read_nanogpt(path: Path, checkpoint: dict, device: torch.device) -> Loaded:
    saved = nanogpt_config(checkpoint, path)
    tokenizer, meta = nanogpt_tokenizer(path, checkpoint, saved)
    what = f"the model in {path}"
    config = _with_padding(saved, tokenizer, what)
    check_fits(config, what, device)
    state = nanogpt_weights(checkpoint, path)
    weights = read_weights({name: tuple(t.shape) for name, t in state.items()}, state.__getitem__, config,
                           conv1d=False, where=str(path))
    model = built(config, weights, device)
    source = {"format": NANOGPT, "path": str(path), "meta": None if meta is None else str(meta),
              "iter_num": checkpoint["iter_num"] if type(checkpoint.get("iter_num")) is int else None,
              "best_val_loss": _number(checkpoint.get("best_val_loss"))}
    return _loaded(model, tokenizer, source)


def _loaded(model: GPT, tokenizer: Tokenizer, source: dict) -> Loaded:
    return Loaded(model, tokenizer, {"model_config": model.config.to_dict(), "tokenizer": tokenizer.to_meta(),
                                     "imported": source})


def _number(value: object) -> float | None:
    """A plain number, or a tensor holding one (nanoGPT saves its best loss as one), as a float; else None."""
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _with_padding(saved: GPTConfig, tokenizer: Tokenizer, what: str) -> GPTConfig:
    """`saved` with the rows beyond the tokenizer's vocabulary (padding) marked never to be sampled."""
    if tokenizer.vocab_size > saved.vocab_size:
        raise ForeignModelError(f"{what} has {saved.vocab_size:,} token rows, fewer than the {tokenizer.vocab_size:,} "
                                f"tokens of its vocabulary ({tokenizer.name}); use the model and vocabulary that "
                                f"were saved together")
    if tokenizer.vocab_size < saved.vocab_size:
        return dataclasses.replace(saved, vocab_used=tokenizer.vocab_size)
    return saved
