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
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from data.tokenizer import Tokenizer, tokenizer_from_meta
from errors import UsageError, UserError, warn
from model.gpt import GPT, MODEL_FIELDS, GPTConfig
from trainer.config import TrainConfig

FORMAT = "gptwatch-checkpoint"
FORMAT_VERSION = 1
ZIP_MAGIC = b"PK\x03\x04"


# What a resumed run must share with its checkpoint: the vocabulary is checked through the
# tokenizer, a smaller block_size just trains on shorter windows, and dropout only acts in training.
RESUME_MUST_MATCH = tuple(name for name in MODEL_FIELDS if name not in ("vocab_size", "block_size", "dropout"))


class CheckpointError(UserError):
    pass


def save_checkpoint(path: str | Path, payload: dict, keep_previous: str | Path | None = None) -> None:
    """Atomically replaces `path` with `payload`. With `keep_previous`, the
    checkpoint being replaced survives under that name (hard-linked just before
    the swap, so `path` itself is never missing)."""
    path = Path(path)
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, **payload}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        if keep_previous is not None and path.exists():
            keep_previous = Path(keep_previous)
            keep_previous.unlink(missing_ok=True)
            try:
                os.link(path, keep_previous)
            except OSError:  # a filesystem without hard links
                shutil.copy2(path, keep_previous)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        kept = " (the previous checkpoint is intact)" if path.exists() else ""
        raise CheckpointError(f"cannot write checkpoint {path}: {exc.strerror or exc}{kept}; "
                              f"free disk space or choose a writable --out_dir") from None
    except BaseException:  # e.g. a second Ctrl-C mid-save: leave no half-written temp file behind
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_temp_files(path: str | Path) -> None:
    """Deletes temporary files that a save killed mid-write (kill -9, power
    loss) left beside `path`; a save still running in a live process is kept."""
    path = Path(path)
    for tmp in path.parent.glob(f".{path.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue
        tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        with path.open("rb") as fh:
            head = fh.read(len(ZIP_MAGIC))
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path} ({exc.strerror or exc}); check its permissions") \
            from None
    if not head:
        raise CheckpointError(f"{path} is empty (0 bytes), perhaps from an interrupted copy; use an earlier "
                              f"copy or retrain")
    # torch.save writes a zip archive; anything else (an old-style pickle, text, random bytes) is not ours,
    # and is refused before any unpickler sees it.
    if head != ZIP_MAGIC:
        raise CheckpointError(f"{path} is not a checkpoint written by this trainer (not a PyTorch archive); "
                              f"give the ckpt.pt that train.py wrote")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _pickled_object(str(exc))
        if found is not None:
            raise CheckpointError(f"refusing {path}: it contains a pickled Python object ({found}), which could "
                                  f"run code when loaded; only load checkpoints written by this trainer") from None
        raise CheckpointError(f"{path} is not a readable checkpoint (its pickled data is damaged); it may be "
                              f"truncated or corrupt: use an earlier copy or retrain") from exc
    except Exception as exc:  # a damaged archive surfaces as many types (RuntimeError, OSError, KeyError, ...)
        raise CheckpointError(f"{path} is not a readable checkpoint; it may be truncated or corrupt: use an "
                              f"earlier copy or retrain") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint written by this trainer; give the ckpt.pt that "
                              f"train.py wrote")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format version {version}, this trainer reads version "
                              f"{FORMAT_VERSION}; use the trainer version that wrote it, or retrain")
    return payload


def _pickled_object(message: str) -> str | None:
    """The object torch's weights-only unpickler refused, from its error message; None when it
    refused for another reason (damaged data)."""
    match = re.search(r"GLOBAL (\S+)", message)
    if match:
        return match.group(1)
    if "Can only create new object" in message or "call reduce for unrecognized function" in message:
        return "an object of a class that is not a tensor"
    return None


@dataclass
class Loaded:
    """A checkpoint made usable: the model in eval mode on its device, its tokenizer, and the
    checkpoint's other contents (step, configs, run name)."""

    model: GPT
    tokenizer: Tokenizer
    payload: dict


def load_model(path: str | Path, device: torch.device) -> Loaded:
    """The one way from a checkpoint file (or the folder holding ckpt.pt) to a model and its tokenizer."""
    payload = load_checkpoint(path, map_location=device)
    try:
        config = GPTConfig(**payload["model_config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} holds no usable model_config ({exc}); it was not written by this "
                              f"trainer's train.py: use the ckpt.pt that train.py wrote") from None
    model = GPT(config)
    try:
        model.load_state_dict(payload["model"])
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: the saved weights do not fit the saved model_config "
                              f"({' '.join(str(exc).split())[:200]}); use the ckpt.pt that train.py wrote") from None
    model.to(device).eval()
    return Loaded(model, tokenizer_from_meta(payload["tokenizer"]), payload)


def check_resume_compatible(cfg: TrainConfig, ckpt: dict, tokenizer_meta: dict) -> None:
    """A UsageError naming the first setting that differs from the checkpoint's in a way resuming cannot absorb."""
    saved = ckpt["model_config"]
    if cfg.block_size > saved["block_size"]:  # a smaller one just trains on shorter windows
        raise UsageError(f"--block_size={cfg.block_size} is larger than the {saved['block_size']} the checkpoint "
                         f"was trained with; resume with --block_size={saved['block_size']} or start a new out_dir")
    for key in RESUME_MUST_MATCH:
        if saved[key] != getattr(cfg, key):
            raise UsageError(f"config key '{key}' is {getattr(cfg, key)!r} but the checkpoint was trained with "
                             f"{saved[key]!r}; use the same value to resume, or a new --out_dir")
    saved_optimizer = ckpt["train_config"].get("optimizer", "adamw")
    if saved_optimizer != cfg.optimizer:  # the optimizer states would not fit
        raise UsageError(f"config key 'optimizer' is {cfg.optimizer!r} but the checkpoint was trained with "
                         f"{saved_optimizer!r}; use the same value to resume, or a new --out_dir")
    if ckpt["tokenizer"] != tokenizer_meta:
        raise UsageError("the checkpoint's vocabulary does not match this data's; resume with the dataset and "
                         "tokenizer it was trained on, or start a new --out_dir")


class CheckpointWriter:
    """A run's saves to `path`. The first save of a run that did not resume keeps the
    checkpoint it replaces (an earlier run's) as ckpt.prev.pt, so a new run never silently
    destroys the last one; it does so only at that first save, so a run that fails before
    saving leaves everything in place."""

    def __init__(self, path: Path, *, keep_previous: bool, saved_step: int | None) -> None:
        self.path = path
        self.keep_previous = keep_previous
        self.saved_step = saved_step  # step of the checkpoint on disk from this run (or the one resumed)

    def save(self, payload: dict, step: int) -> None:
        previous = self.path.with_name("ckpt.prev.pt") if self.keep_previous else None
        save_checkpoint(self.path, payload, keep_previous=previous)
        if previous is not None:
            self.keep_previous = False
            warn(f"{self.path} held an earlier run (this one has no --resume); kept it as {previous}")
        self.saved_step = step
