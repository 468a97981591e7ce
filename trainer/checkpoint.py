"""Checkpoints: written atomically, read without running any pickled code.

A checkpoint holds only tensors and plain Python values (dicts, lists,
strings, numbers), so `torch.load(weights_only=True)` can read it: a file from
the internet cannot execute code on load. It is written to a temporary file
in the same folder, flushed to disk, then renamed over the old one, so a crash
at any moment leaves the previous complete checkpoint in place.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import torch

from errors import UserError

FORMAT = "gptwatch-checkpoint"
FORMAT_VERSION = 1


class CheckpointError(UserError):
    pass


def save_checkpoint(path: str | Path, payload: dict) -> None:
    path = Path(path)
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, **payload}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        kept = " (the previous checkpoint is intact)" if path.exists() else ""
        raise CheckpointError(f"cannot write checkpoint {path}: {exc.strerror or exc}{kept}; "
                              f"free disk space or choose a writable --out_dir") from None


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform allows opening a directory.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "ckpt.pt"
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; train one first (python train.py --out_dir=...) "
                              f"or point --out_dir at the folder that holds ckpt.pt")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise CheckpointError(f"refusing {path}: it contains pickled Python objects, which could run code "
                                  f"when loaded; only load checkpoints written by this trainer") from None
        raise CheckpointError(f"{path} is not a readable checkpoint ({exc}); it may be truncated or "
                              f"corrupt: use an earlier copy or retrain") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(exc).__name__}); it may be truncated "
                              f"or corrupt: use an earlier copy or retrain") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint written by this trainer; give the ckpt.pt that "
                              f"train.py wrote")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format version {version}, this trainer reads version "
                              f"{FORMAT_VERSION}; use the trainer version that wrote it, or retrain")
    return payload
