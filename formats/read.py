"""The checkpoint format train.py writes, read without running any pickled code.

A checkpoint holds only tensors and plain Python values (dicts, lists, strings, numbers), so
`torch.load(weights_only=True)` can read it: a file from the internet cannot execute code on load.
Everything a model (and a resumed run) reads from it is checked before anything large is allocated,
and every problem is one `CheckpointError` naming it and the fix. Writing it is `trainer.checkpoint`'s.
"""

from __future__ import annotations

import pickle
import re
import shlex
from dataclasses import fields
from pathlib import Path

import torch

from cli import UsageError, UserError
from config import FIELDS, TrainConfig, saved_config
from data.tokenizer import TOKENIZERS
from files import cannot, regular_file
from model.config import ALWAYS_RECORDED, GPTConfig
from model.gpt import GPT

FORMAT = "gptwatch-checkpoint"
FORMAT_VERSION = 1
ZIP_MAGIC = b"PK\x03\x04"
MAX_STEP = 2**63  # steps are logged as int64 (TensorBoard, torch)
RECORDED_WHEN_SET = tuple(f.name for f in fields(GPTConfig) if f.name not in ALWAYS_RECORDED)


class CheckpointError(UserError):
    pass


def checkpoint_path(path: str | Path) -> Path:
    """The checkpoint file `path` names: itself, or the ckpt.pt in it when it is a folder."""
    path = Path(path)
    return path / "ckpt.pt" if path.is_dir() else path


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint's contents, on the CPU, read without running any pickled code; `CheckpointError`
    for anything that is not a checkpoint this trainer wrote. Check its structure with `validate`."""
    folder = Path(path) if Path(path).suffix != ".pt" else Path(path).parent   # where train.py would write it
    path = regular_file(checkpoint_path(path), "checkpoint", "point --out_dir at the folder that holds the "
                        f"ckpt.pt train.py wrote, or train one there first: python train.py "
                        f"--out_dir={shlex.quote(str(folder))}", CheckpointError)
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
        found = pickled_object(str(exc))
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
        raise unusable(path, problem)
    # Weights (and, to resume, optimizer moments) that are nan or inf would sample garbage, or make every
    # resumed step nan: a run that diverged never saves them, so such a file was damaged or made elsewhere.
    found = _not_finite({"model": checkpoint["model"]}, "") or (
        _not_finite({"optimizer": checkpoint["optimizer"]}, "") if for_resume else None)
    if found is not None:
        raise CheckpointError(f"{path} holds numbers that are not finite ({found}); it comes from a run that "
                              f"diverged, or is damaged: use an earlier checkpoint (ckpt.prev.pt?) or retrain")
    return config


def unusable(path: str | Path, problem: str) -> CheckpointError:
    """The error for a checkpoint that holds `problem` ("its model_config is invalid (...)")."""
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
    if config.absolute_positions:
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
    # The settings of RECORDED_WHEN_SET are there only when set (GPTConfig.to_dict): a model's switches, and what a
    # model trained elsewhere brought.
    if not isinstance(config, dict) or not set(ALWAYS_RECORDED) <= set(config) <= {f.name for f in fields(GPTConfig)}:
        return (f"'model_config' is missing or does not hold exactly {', '.join(ALWAYS_RECORDED)} (and of "
                f"{', '.join(RECORDED_WHEN_SET)} those it sets)")
    if not isinstance(checkpoint.get("tokenizer"), dict):
        return "it has no 'tokenizer'"
    if type(checkpoint.get("step")) is not int or not 0 <= checkpoint["step"] < MAX_STEP:
        return "'step' is not a step count (a whole number from 0 to 2**63 - 1)"
    if not for_resume:
        return None
    for key, kind in _RESUME_FIELDS.items():
        if not isinstance(checkpoint.get(key), kind) or isinstance(checkpoint.get(key), bool):
            return f"{key!r}, which resuming needs, is missing or not a {getattr(kind, '__name__', 'number')}"
    rng = checkpoint["rng"]
    if not all(isinstance(rng.get(k), torch.Tensor) and rng[k].dtype == torch.uint8 for k in ("torch", "batches")):
        return "'rng' does not hold the random generators' states"
    if checkpoint.get("eval_step") is not None and (type(checkpoint["eval_step"]) is not int
                                                    or not 0 <= checkpoint["eval_step"] < MAX_STEP):
        return "'eval_step' is not a step"
    if checkpoint["best_val_loss"] != checkpoint["best_val_loss"]:
        return "'best_val_loss' is nan"
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


def pickled_object(message: str) -> str | None:
    """The object torch's weights-only unpickler refused, from its error message; None when it
    refused for another reason (damaged data)."""
    match = re.search(r"GLOBAL (\S+)", message)
    if match:
        return match.group(1)
    if "Can only create new object" in message or "call reduce for unrecognized function" in message:
        return "an object of a class that is not a tensor"
    return None


def load_weights(model: GPT, weights: dict, path: str | Path) -> None:
    """`model.load_state_dict(weights)`, with a `CheckpointError` naming the first tensor that does
    not fit the model."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    problem = _mismatch(expected, {name: tuple(t.shape) for name, t in weights.items()})
    if problem is not None:
        raise unusable(path, problem)
    try:
        model.load_state_dict(weights)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: the saved weights do not fit the saved model_config "
                              f"({' '.join(str(exc).split())[:200]}); use the ckpt.pt that train.py wrote") from None


def saved_settings(checkpoint: dict, path: str | Path) -> TrainConfig | None:
    """The settings the checkpoint records (its train_config, and the config keys of its data record), checked
    as a config's are, so that nothing read from them is used unchecked (a seed no generator takes, a path
    holding NUL); `CheckpointError` naming the first bad one. None for a checkpoint without settings (one
    a tool wrote: sampling needs none)."""
    saved, data = checkpoint.get("train_config"), checkpoint.get("data")
    if saved is None:
        return None
    if not isinstance(saved, dict) or not isinstance(data, (dict, type(None))):
        raise unusable(path, "its 'train_config' or 'data' is not a table of settings")
    for key, value in (data or {}).items():  # where its text was: names, which no config key checks
        if key not in FIELDS and not (value is None or isinstance(value, str) and "\x00" not in value):
            raise unusable(path, f"its data record's {key!r} is not a name or path")
    record = "train_config"
    try:
        config = saved_config(saved, "in its train_config")
        record = "data record"
        # A fine-tune's data record names the model's own vocabulary (data/prepare.py's label), no config value.
        record_settings = {key: value for key, value in (data or {}).items()
                           if key != "tokenizer" or value in TOKENIZERS
                           or not isinstance(value, str) or "\x00" in value}
        saved_config({**saved, **record_settings}, "in its data record")
    except UsageError as exc:
        raise unusable(path, f"its {record} is invalid ({exc})") from None
    return config
