"""Checkpoints: written atomically, read without running any pickled code.

A checkpoint holds only tensors and plain Python values (dicts, lists,
strings, numbers), so `torch.load(weights_only=True)` can read it: a file from
the internet cannot execute code on load. It is written to a temporary file
in the same folder, flushed to disk, then renamed over the old one, so a crash
at any moment leaves the previous complete checkpoint in place.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from data.tokenizer import Tokenizer, TokenizerMetaError, tokenizer_from_meta
from errors import UsageError, UserError, warn
from files import (
    cannot,
    clear_for_file,
    glob_escape,
    inside_name,
    regular_file,
    remove_dead_leftovers,
    replace_file,
    writable_folder,
)
from model.gpt import GPT, MODEL_FIELDS, GPTConfig
from trainer.config import TrainConfig
from trainer.resources import is_out_of_memory

FORMAT = "gptwatch-checkpoint"
FORMAT_VERSION = 1
ZIP_MAGIC = b"PK\x03\x04"


# What a resumed run must share with its checkpoint: the vocabulary is checked through the
# tokenizer, a smaller block_size just trains on shorter windows, and dropout only acts in training.
RESUME_MUST_MATCH = tuple(name for name in MODEL_FIELDS if name not in ("vocab_size", "block_size", "dropout"))


class CheckpointError(UserError):
    pass


def save_checkpoint(path: str | Path, checkpoint: dict, keep_previous: str | Path | None = None) -> None:
    """Atomically replaces `path` with `checkpoint`. With `keep_previous`, the
    checkpoint being replaced survives under that name (hard-linked just before
    the swap, so `path` itself is never missing). The temporary file is a new one of
    its own (`files.fresh_file`), so a link planted in the folder is never written through."""
    path = Path(path)
    checkpoint = {"format": FORMAT, "format_version": FORMAT_VERSION, **checkpoint}

    def keep() -> None:
        if keep_previous is not None and path.exists():
            _keep(path, Path(keep_previous))

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clear_for_file(path, "the checkpoint", "move it away or choose another --out_dir", CheckpointError)
        # replace_file leaves no half-written temporary file, also on a second Ctrl-C mid-save
        replace_file(path, lambda fh: _save(checkpoint, fh), before_replace=keep)
        _fsync_dir(path.parent)
    except OSError as exc:
        kept = " (the previous checkpoint is intact)" if path.is_file() else ""
        fix = ("free disk space or choose a writable --out_dir" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
               else "choose a writable --out_dir")
        raise CheckpointError(f"cannot write checkpoint {path}: {exc.strerror or exc}{kept}; {fix}") from None


def _keep(path: Path, previous: Path) -> None:
    """`path` also under the name `previous`: a hard link (a link or file already there is replaced, never
    followed), or a copy on a filesystem without hard links."""
    clear_for_file(previous, "the earlier run's checkpoint", "move it away or choose another --out_dir",
                   CheckpointError, follow_links=False)
    previous.unlink(missing_ok=True)
    try:
        os.link(path, previous, follow_symlinks=False)
    except OSError:  # a filesystem without hard links
        with open(path, "rb") as source:   # streamed: a checkpoint can be large
            replace_file(previous, lambda fh: shutil.copyfileobj(source, fh))


class _RecordingFile:
    """A file whose failed writes are remembered: torch.save reports a full disk as a RuntimeError about
    zip positions, and this keeps the OSError that really happened."""

    def __init__(self, fh) -> None:
        self.fh = fh
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str):
        return getattr(self.fh, name)


def _save(checkpoint: dict, fh) -> None:
    recording = _RecordingFile(fh)
    try:
        torch.save(checkpoint, recording)
    except RuntimeError:
        if recording.error is not None:
            raise recording.error from None
        raise


def check_out_dir(path: Path, *, keeps_previous: bool = False) -> None:
    """Before a run starts: its out_dir can be written, nothing but a checkpoint stands at `path`
    (found now, not at the first save) nor, when the run will keep an earlier one (`keeps_previous`),
    at ckpt.prev.pt, and no temporary file of a killed save lies beside it."""
    writable_folder(path.parent, "out_dir")
    clear_for_file(path, "this run's checkpoint", "move it away or choose another --out_dir")
    if keeps_previous:
        clear_for_file(previous_path(path), "the earlier run's checkpoint",
                       "move it away or choose another --out_dir", follow_links=False)
    remove_stale_temp_files(path)


def previous_path(path: Path) -> Path:
    """Where a new run keeps the earlier run's checkpoint it replaces."""
    return path.with_name("ckpt.prev.pt")


def remove_stale_temp_files(path: str | Path) -> None:
    """Deletes temporary files that a save killed mid-write (kill -9, power
    loss) left beside `path`; a save still running in a live process is kept."""
    path = Path(path)
    remove_dead_leftovers(path.parent, f".{glob_escape(path.name)}.tmp-*")


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


def checkpoint_path(path: str | Path) -> Path:
    """The checkpoint file `path` names: itself, or the ckpt.pt in it when it is a folder."""
    path = Path(path)
    return path / "ckpt.pt" if path.is_dir() else path


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint's contents, on the CPU, read without running any pickled code; `CheckpointError`
    for anything that is not a checkpoint this trainer wrote. Check its structure with `validate`."""
    path = regular_file(checkpoint_path(path), "checkpoint", "point --out_dir at the folder that holds the "
                        "ckpt.pt train.py wrote, or train one first (python train.py --out_dir=...)", CheckpointError)
    try:
        with path.open("rb") as fh:
            head = fh.read(len(ZIP_MAGIC))
    except OSError as exc:
        raise CheckpointError(f"{cannot('read checkpoint', path, exc)}; check its permissions") from None
    if not head:
        raise CheckpointError(f"{path} is empty (0 bytes), perhaps from an interrupted copy; use an earlier "
                              f"copy or retrain")
    # torch.save writes a zip archive; anything else (an old-style pickle, text, random bytes) is not ours,
    # and is refused before any unpickler sees it.
    if head != ZIP_MAGIC:
        raise CheckpointError(f"{path} is not a checkpoint written by this trainer (not a PyTorch archive); "
                              f"give the ckpt.pt that train.py wrote")
    try:
        # Always onto the CPU: where the model runs is decided later, so a device that is missing here
        # can never make a healthy checkpoint look damaged.
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _pickled_object(str(exc))
        if found is not None:
            raise CheckpointError(f"refusing {path}: it contains a pickled Python object ({found}), which could "
                                  f"run code when loaded; only load checkpoints written by this trainer") from None
        raise CheckpointError(f"{path} is not a readable checkpoint (its pickled data is damaged); it may be "
                              f"truncated or corrupt: use an earlier copy or retrain") from exc
    except MemoryError:
        raise CheckpointError(f"not enough memory to load {path} ({path.stat().st_size:,} bytes); close other "
                              f"programs or load it on a machine with more memory") from None
    except Exception as exc:  # a damaged archive surfaces as many types (RuntimeError, OSError, KeyError, ...)
        raise CheckpointError(f"{path} is not a readable checkpoint; it may be truncated or corrupt: use an "
                              f"earlier copy or retrain") from exc
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint written by this trainer; give the ckpt.pt that "
                              f"train.py wrote")
    version = checkpoint.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format version {version}, this trainer reads version "
                              f"{FORMAT_VERSION}; use the trainer version that wrote it, or retrain")
    return checkpoint


def validate(checkpoint: dict, path: str | Path, *, for_resume: bool = False) -> GPTConfig:
    """The checkpoint's model config, after checking that everything a model (and, `for_resume`, a
    resumed run) reads from it is there with the right type; `CheckpointError` naming the first problem."""
    problem = _structure_problem(checkpoint, for_resume)
    if problem is None:
        try:
            config = GPTConfig(**checkpoint["model_config"])
        except (TypeError, ValueError) as exc:
            problem = f"its model_config is invalid ({exc})"
        else:
            problem = _shape_problem(config, checkpoint["model"])
    if problem is not None:
        raise _unusable(path, problem)
    # Weights (and, to resume, optimizer moments) that are nan or inf would sample garbage, or make every
    # resumed step nan: a run that diverged never saves them, so such a file was damaged or made elsewhere.
    found = _not_finite({"model": checkpoint["model"]}, "") or (
        _not_finite({"optimizer": checkpoint["optimizer"]}, "") if for_resume else None)
    if found is not None:
        raise CheckpointError(f"{path} holds numbers that are not finite ({found}); it comes from a run that "
                              f"diverged, or is damaged: use an earlier checkpoint (ckpt.prev.pt?) or retrain")
    return config


def _unusable(path: str | Path, problem: str) -> CheckpointError:
    return CheckpointError(f"{path} is not a usable checkpoint: {problem}; it was not written by this "
                           f"trainer's train.py, or was edited: use the ckpt.pt that train.py wrote")


_RESUME_FIELDS = {"optimizer": dict, "train_config": dict, "rng": dict, "best_val_loss": (float, int),
                  "run_name": str}


def _shape_problem(config: GPTConfig, weights: dict) -> str | None:
    """Whether `weights` have the sizes that decide every other shape of the model `config`
    describes: the layer count, the token table (vocabulary x width) and, for gpt2, the position
    table. Read from the checkpoint's own tensors, so a config describing a model far larger than
    its weights is refused before anything is allocated; `load_weights` compares every name and
    shape with the model once it is built."""
    layers = {name.split(".")[1] for name in weights if name.startswith("blocks.")}
    if len(layers) != config.n_layer:
        return f"its model_config says {config.n_layer} layers, its weights hold {len(layers)}"
    sizes = {"wte.weight": (config.vocab_size, config.n_embd)}
    if not config.modern:
        sizes["wpe.weight"] = (config.block_size, config.n_embd)
    return _mismatch(sizes, {name: tuple(weights[name].shape) for name in sizes if name in weights})


def _mismatch(expected: dict[str, tuple], found: dict[str, tuple]) -> str | None:
    """The first tensor whose shape (or presence) differs, in words; None when all fit."""
    differ = sorted(set(expected) ^ set(found)) or [name for name in expected if expected[name] != found[name]]
    if not differ:
        return None
    name = differ[0]
    return (f"its weights do not fit its model_config ({name}: expected {expected.get(name, 'nothing')}, "
            f"found {found.get(name, 'nothing')})")


def _structure_problem(checkpoint: dict, for_resume: bool) -> str | None:
    weights = checkpoint.get("model")
    if not isinstance(weights, dict) or not weights or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) and v.is_floating_point() for k, v in weights.items()):
        return "'model' is not a set of named floating-point tensors"
    config = checkpoint.get("model_config")
    if not isinstance(config, dict) or set(config) != set(MODEL_FIELDS):
        return f"'model_config' is missing or does not hold exactly {', '.join(MODEL_FIELDS)}"
    if not isinstance(checkpoint.get("tokenizer"), dict):
        return "it has no 'tokenizer'"
    if type(checkpoint.get("step")) is not int or checkpoint["step"] < 0:
        return "'step' is not a step count"
    if not for_resume:
        return None
    for key, kind in _RESUME_FIELDS.items():
        if not isinstance(checkpoint.get(key), kind) or isinstance(checkpoint.get(key), bool):
            return f"{key!r}, which resuming needs, is missing or not a {getattr(kind, '__name__', 'number')}"
    rng = checkpoint["rng"]
    if not all(isinstance(rng.get(k), torch.Tensor) and rng[k].dtype == torch.uint8 for k in ("torch", "batches")):
        return "'rng' does not hold the random generators' states"
    if checkpoint.get("eval_step") is not None and type(checkpoint["eval_step"]) is not int:
        return "'eval_step' is not a step"
    return None


def _not_finite(tensors: dict, where: str) -> str | None:
    """The first tensor (nested dicts and lists searched) holding nan or inf, in words; None when all are finite."""
    for name, value in tensors.items():
        if isinstance(value, dict):
            found = _not_finite(value, f"{where}{name}.")
        elif isinstance(value, (list, tuple)):
            found = _not_finite(dict(enumerate(value)), f"{where}{name}.")
        elif isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            kinds = "/".join(k for k, f in (("nan", torch.isnan), ("inf", torch.isinf)) if bool(f(value).any()))
            found = f"{where}{name} holds {bad:,} {kinds} value{'s' if bad > 1 else ''} of {value.numel():,}"
        else:
            found = None
        if found is not None:
            return found
    return None


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
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(f"{path}: its tokenizer has {tokenizer.vocab_size} tokens but its model_config "
                              f"{config.vocab_size}; use the ckpt.pt that train.py wrote")
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


def load_weights(model: GPT, weights: dict, path: str | Path) -> None:
    """`model.load_state_dict(weights)`, with a `CheckpointError` naming the first tensor that does
    not fit the model."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    problem = _mismatch(expected, {name: tuple(t.shape) for name, t in weights.items()})
    if problem is not None:
        raise _unusable(path, problem)
    try:
        model.load_state_dict(weights)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: the saved weights do not fit the saved model_config "
                              f"({' '.join(str(exc).split())[:200]}); use the ckpt.pt that train.py wrote") from None


def restore_training(checkpoint: dict, path: Path, model: GPT, optimizer: Any, batches: Any) -> None:
    """Puts a resumed run's weights, optimizer state and random generators back, refusing any part
    that does not fit this run. The optimizer's settings (betas, weight decay) stay this config's;
    only its state (moments, momentum) comes from the checkpoint."""
    load_weights(model, checkpoint["model"], path)
    try:
        _load_optimizer_state(optimizer, checkpoint["optimizer"])
        batches.load_state(checkpoint["rng"]["batches"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
    except (KeyError, IndexError, RuntimeError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: its optimizer or random-generator state does not fit this model "
                              f"({' '.join(str(exc).split())[:200]}); resume from the ckpt.pt that train.py wrote, "
                              f"or start a new --out_dir") from None


def _load_optimizer_state(optimizer: Any, saved: dict) -> None:
    parts = getattr(optimizer, "optimizers", None)  # trainer.muon.Optimizers: several, saved under "0", "1"
    pairs = [(opt, saved[str(i)]) for i, opt in enumerate(parts)] if parts else [(optimizer, saved)]
    for opt, state in pairs:
        fresh = opt.state_dict()
        n_params = sum(len(group["params"]) for group in fresh["param_groups"])
        if not isinstance(state["state"], dict) or any(type(k) is not int or not 0 <= k < n_params
                                                       for k in state["state"]):
            raise ValueError("its optimizer state names parameters this model does not have")
        opt.load_state_dict({"state": state["state"], "param_groups": fresh["param_groups"]})
        for param, values in opt.state.items():
            for name, value in values.items():
                if not isinstance(value, torch.Tensor) or (value.dim() > 0 and value.shape != param.shape):
                    raise ValueError(f"optimizer state {name!r} does not match a parameter of shape "
                                     f"{tuple(param.shape)}")


def resumed_checkpoint(cfg: TrainConfig, path: Path, tokenizer_meta: dict, data: dict | None = None) -> dict:
    """The checkpoint a --resume run continues from, after checking that it is complete and that this
    run's settings and data (`tokenizer_meta`, and `data`, what defines its split: see
    `trainer.Trainer.data_identity`) can continue it."""
    if not path.exists():
        raise UserError(f"--resume but there is no checkpoint at {path}; drop --resume to start a new "
                        f"run, or set --out_dir to the folder that holds ckpt.pt")
    checkpoint = load_checkpoint(path)
    validate(checkpoint, path, for_resume=True)
    check_resume_compatible(cfg, checkpoint, tokenizer_meta)
    if data is not None:
        check_same_data(checkpoint, data, path)
    problem = inside_name(checkpoint["run_name"]) if not cfg.run_name else None
    if problem is not None:  # the resumed run would write its TensorBoard logs to log_dir/run_name
        raise CheckpointError(f"{path} holds the run name {checkpoint['run_name']!r}, which {problem}, so its "
                              f"TensorBoard logs would go outside --log_dir; resume with --run_name=NAME")
    return checkpoint


def check_same_data(checkpoint: dict, data: dict, path: Path) -> None:
    """A UsageError when this run would train and validate on other data than the checkpoint's: another split
    (val_fraction) or another text (its sha256), so the model would validate on text it trained on and its best
    loss would not compare. Where the data lives (the file's path, data_dir) may change. A checkpoint from before
    this was recorded is checked for its split only, with one warning."""
    saved = checkpoint.get("data") if isinstance(checkpoint.get("data"), dict) else None
    fraction = (saved or checkpoint["train_config"]).get("val_fraction")
    if isinstance(fraction, float) and fraction != data["val_fraction"]:
        raise UsageError(f"config key 'val_fraction' is {data['val_fraction']:g} but the checkpoint was trained with "
                         f"{fraction:g}: the new validation split would hold text the model trained on; resume with "
                         f"--val_fraction={fraction:g}, or start a new --out_dir")
    if saved is None or not isinstance(saved.get("source_sha256"), str):
        warn(f"{path} does not record which text it was trained on (an older checkpoint), so resuming cannot check "
             f"that {data['source']} is that text; going on as if it were")
        return
    if saved["source_sha256"] != data["source_sha256"]:
        raise UsageError(f"--dataset={data['dataset']} is not the text the checkpoint was trained on "
                         f"({saved.get('source')}, sha256 {saved['source_sha256'][:12]}; this one's is "
                         f"{data['source_sha256'][:12]}): its validation split would hold text the model trained on; "
                         f"resume with the same text, or start a new --out_dir")


def check_resume_compatible(cfg: TrainConfig, checkpoint: dict, tokenizer_meta: dict) -> None:
    """A UsageError naming the first setting that differs from the checkpoint's in a way resuming cannot absorb."""
    saved = checkpoint["model_config"]
    if cfg.block_size > saved["block_size"]:  # a smaller one just trains on shorter windows
        raise UsageError(f"--block_size={cfg.block_size} is larger than the {saved['block_size']} the checkpoint "
                         f"was trained with; resume with --block_size={saved['block_size']} or start a new out_dir")
    for key in RESUME_MUST_MATCH:
        if saved[key] != getattr(cfg, key):
            raise UsageError(f"config key '{key}' is {getattr(cfg, key)!r} but the checkpoint was trained with "
                             f"{saved[key]!r}; use the same value to resume, or a new --out_dir")
    saved_optimizer = checkpoint["train_config"].get("optimizer", "adamw")
    if saved_optimizer != cfg.optimizer:  # the optimizer states would not fit
        raise UsageError(f"config key 'optimizer' is {cfg.optimizer!r} but the checkpoint was trained with "
                         f"{saved_optimizer!r}; use the same value to resume, or a new --out_dir")
    if checkpoint["tokenizer"] != tokenizer_meta:
        raise UsageError("the checkpoint's vocabulary does not match this data's; resume with the dataset and "
                         "tokenizer it was trained on, or start a new --out_dir")


class CheckpointWriter:
    """A run's saves to `path`. The first save of a run that did not resume keeps the
    checkpoint it replaces (an earlier run's) as ckpt.prev.pt, so a new run never silently
    destroys the last one; it does so only at that first save, so a run that fails before
    saving leaves everything in place. `guard`, when set, is called before every save and
    raises when this run may no longer write there (its out_dir lock was lost: `RunLock.check`)."""

    def __init__(self, path: Path, *, keep_previous: bool, saved_step: int | None) -> None:
        self.path = path
        self.keep_previous = keep_previous
        self.saved_step = saved_step  # step of the checkpoint on disk from this run (or the one resumed)
        self.guard: Callable[[], None] | None = None   # set by the command that holds the run's lock

    def save(self, checkpoint: dict, step: int) -> None:
        if self.guard is not None:
            self.guard()
        previous = previous_path(self.path) if self.keep_previous else None
        save_checkpoint(self.path, checkpoint, keep_previous=previous)
        if previous is not None:
            self.keep_previous = False
            warn(f"{self.path} held an earlier run (this one has no --resume); kept it as {previous}")
        self.saved_step = step
