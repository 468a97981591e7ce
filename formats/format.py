"""What a model format is: a `Format`, the one record each format's module fills in (formats/checkpoint.py,
nanogpt.py, huggingface.py, transformerlens.py) and formats/sources.py registers in `FORMATS`. Everything else in
gptwatch reads and writes model files through those records, never by a format's name.

And what the formats share when they are read: the `Source` that `identify` finds, the `Loaded` model that
reading gives, `CheckpointError`, and how a model read from elsewhere becomes a gptwatch model (`imported`). What
every export shares is formats/export.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import UserError
from data.tokenizer import FullGPT2Tokenizer, Tokenizer
from model.config import GPTConfig
from model.gpt import GPT
from model.memory import parameter_count, shortfall, size_text

# What a format trained elsewhere reads from its file: (its gptwatch config, its tokenizer, weights(config) ->
# gptwatch's state dict, the record of what was read, kept under "imported"). The weights come last: they are read
# only once the model is known to fit in memory.
Parts = tuple[GPTConfig, Tokenizer, Callable[[GPTConfig], dict[str, torch.Tensor]], dict]


class CheckpointError(UserError):
    """A model file that cannot be read, or not as one computing exactly the same function."""


@dataclass(frozen=True)
class Format:
    """One format of model files: what its module does of recognising, reading and writing them, as the rest of
    gptwatch calls it. What a format does not do stays None: TransformerLens's files are only written, nanoGPT's
    only read."""

    name: str  # as a Source and the record of an imported model say it ("imported": {"format": name})
    title: str  # in words
    elsewhere: bool = False  # its models were trained elsewhere: told what they are when read; fine-tuned, new runs
    # Reading. Whether a folder is one; whether a file is one, from its path and, for a PyTorch file, its contents
    # (read once, for every format to look at; None for any other file).
    is_folder_of: Callable[[Path], bool] | None = None
    is_file_of: Callable[[Path, object], bool] | None = None
    load: Callable[[Source, torch.device, float | None], Loaded] | None = None  # (source, device, dropout)
    describe: Callable[[dict], str] | None = None  # what was read, in words, from its record (elsewhere only)
    # Writing, as the export target `sample.py --export TARGET PATH`: TARGET; the file or folder PATH names (checked
    # before the model is read); refusing a path that holds what the export must not replace (with what stands
    # there, `files.what_stands_at`'s words, None for a regular file) and a model it cannot hold exactly
    # (`export.Unsupported`); and writing (loaded, its model in float32 on the CPU, path, the record of where it
    # came from) -> (what it wrote, how close it computes, `export.same_logits`'s words, how to load it).
    target: str | None = None
    destination: Callable[[str], Path] | None = None
    check_path: Callable[[Path, str | None], None] | None = None
    check_supported: Callable[[GPTConfig], None] | None = None
    write: Callable[[Loaded, GPT, Path, dict], tuple[str, str, str]] | None = None


@dataclass(frozen=True)
class Source:
    """A model and where it is: its `format`, its `path` as given (None for a hub model not fetched yet), the `hub`
    name, and the `contents` of its PyTorch file when `identify` read it."""

    format: Format
    path: Path | None = None
    hub: str | None = None
    contents: object = None

    @property
    def elsewhere(self) -> bool:
        return self.format.elsewhere


@dataclass
class Loaded:
    """A model file made usable: the model in eval mode on its device, its tokenizer, and the checkpoint's other
    contents (for a model trained elsewhere, its model_config, tokenizer and what was read, under "imported")."""

    model: GPT
    tokenizer: Tokenizer
    checkpoint: dict


# --- reading a model trained elsewhere ------------------------------------------------------------------------


def imported(what: str, parts: Parts, device: torch.device, dropout: float | None) -> Loaded:
    """The gptwatch model computing what the model `what` (in messages) computes, from the `parts` its format read,
    on `device` in eval mode; its dropout set to `dropout` when given."""
    config, tokenizer, weights, record = parts
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{what} has {config.vocab_size:,} token rows, fewer than the "
            f"{tokenizer.vocab_size:,} tokens of its vocabulary ({tokenizer.name}); use the "
            f"model and vocabulary that were saved together"
        )
    if tokenizer.vocab_size < config.vocab_size:  # the rows beyond the vocabulary pad it, never to be sampled
        config = dataclasses.replace(config, vocab_used=tokenizer.vocab_size)
    if dropout is not None:
        config = dataclasses.replace(config, dropout=dropout)
    check_fits(config, what, device)
    state = weights(config)
    with torch.device("meta"):  # its parameters never initialised at random (a second or more for GPT-2's sizes)
        model = GPT(config)
    model.to_empty(device=torch.device("cpu"))  # allocated, not initialised
    model.lm_head.weight = model.wte.weight  # to_empty gave each its own tensor: tie them again, as GPT does
    model.load_state_dict(state, strict=True)
    model.to(device).eval()
    checkpoint = {"model_config": model.config.to_dict(), "tokenizer": tokenizer.to_meta(), "imported": record}
    return Loaded(model, tokenizer, checkpoint)


def config_from(where: object, **settings: object) -> GPTConfig:
    """The `GPTConfig` of the `settings` a model file at `where` gives; `CheckpointError` when no model of gptwatch's
    has them."""
    try:
        return GPTConfig(**settings)
    except ValueError as exc:
        raise CheckpointError(f"{where} describes no model gptwatch can build ({exc})") from None


def gpt2_bpe(config: GPTConfig, too_few: Callable[[int], str]) -> Tokenizer:
    """GPT-2's BPE as it is, the vocabulary of a model from elsewhere that names none; `too_few(its size)` refuses a
    model of fewer token rows."""
    tokenizer = FullGPT2Tokenizer()
    if config.vocab_size < tokenizer.vocab_size:
        raise CheckpointError(too_few(tokenizer.vocab_size))
    return tokenizer


def check_fits(config: GPTConfig, what: str, device: torch.device) -> None:
    """`check_memory` for a model from elsewhere: its float32 weights alone, before anything is downloaded."""
    n = parameter_count(config)  # float32, as gptwatch runs a model from elsewhere
    fix = "use a smaller model, or a machine with more memory"
    check_memory({"float32 weights": n * 4}, device, f"{what} ({n:,} parameters)", fix)


def check_memory(need: dict[str, int], device: torch.device, what: str, fix: str) -> None:
    """Refuses, before anything is allocated, the model `what` needing the bytes `need` (by what holds them) on the
    CPU, where it is built, and on `device`, where it runs and samples; `fix` is what to do instead."""
    for where in dict.fromkeys((torch.device("cpu"), device)):
        counted = need if where == device else {k: n for k, n in need.items() if k != "sampling cache"}
        free = shortfall(sum(counted.values()), where)
        if free is not None:
            raise CheckpointError(
                f"{what} needs at least {size_text(sum(counted.values()))} of memory on {where.type} "
                f"({', '.join(f'{part} {size_text(n)}' for part, n in counted.items() if n)}), and "
                f"{size_text(free)} is free; {fix}"
            )
