"""A PyTorch file written elsewhere (a nanoGPT `ckpt.pt`, a Hugging Face `pytorch_model.bin`), read without
running any code it holds: `torch.load(weights_only=True)`, whose unpickler builds only tensors and plain
values (dicts, lists, strings, numbers) and refuses every other object by name. Memory-mapped where the file
allows it (the zip format torch has written since 1.6), so a large file is not read whole before it is used."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from files import cannot
from formats.layout import ForeignModelError
from formats.read import pickled_object


def load_torch_file(path: Path, what: str) -> object:
    """The contents of `path`, on the CPU; `ForeignModelError` naming the object for a file holding a pickled
    Python object, or saying it is damaged."""
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # the format before torch 1.6
    except pickle.UnpicklingError as exc:
        found = pickled_object(str(exc))
        if found is None:
            raise ForeignModelError(f"{what} {path} is damaged (its pickled data cannot be read); use an intact "
                                    f"copy") from None
        raise ForeignModelError(f"refusing {what} {path}: it holds a pickled Python object ({found}), which could "
                                f"run code when loaded; only tensors and plain values are read") from None
    except OSError as exc:
        raise ForeignModelError(f"{cannot('read ' + what, path, exc)}; check its permissions") from None
    except Exception:  # a damaged archive surfaces as many types (RuntimeError, KeyError, EOFError, ...)
        raise ForeignModelError(f"{what} {path} is not a readable PyTorch file; it may be truncated or corrupt: "
                                f"use an intact copy") from None
