"""gptwatch's own checkpoint, `ckpt.pt`, both ways: what it holds (`Checkpoint`: what train.py saves and what
reading one checks), writing it atomically, reading it back as a model, and the one reader of a PyTorch file
(`read_torch`), which every format's file goes through. A checkpoint holds only tensors and plain Python values,
so `torch.load(weights_only=True)` can read it: a file from the internet cannot execute code on load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import re
import shlex
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from common.errors import UsageError, out_of_memory
from common.files import Kind, cannot, cannot_write, read_bytes, replace_file
from common.settings import FIELDS, TrainConfig, saved_config
from data.tokenizer import TOKENIZERS, TokenizerMetaError, tokenizer_from_meta
from formats.format import CheckpointError, Format, Loaded, Source, check_memory
from model.config import ALWAYS_RECORDED, GPTConfig
from model.gpt import GPT
from model.memory import parameter_count

FORMAT = "gptwatch-checkpoint"
FORMAT_VERSION = 1
CHECKPOINT = "ckpt.pt"  # in out_dir
ZIP_MAGIC = b"PK\x03\x04"
MAX_STEP = 2**63  # steps are logged as int64 (TensorBoard, torch)
RECORDED_WHEN_SET = tuple(f.name for f in fields(GPTConfig) if f.name not in ALWAYS_RECORDED)


# --- what a checkpoint holds ---------------------------------------------------------------------------------


def _entry(problem: Callable[[str, Any], str | None], *, resume: bool = False) -> Any:
    """A field of `Checkpoint`: `problem(name, value)` says what is wrong with its value in a file read back (None
    when nothing is), and `resume` that only resuming needs it (reading the model alone does not)."""
    return field(metadata={"problem": problem, "resume": resume})


def _for_resume(kind: type | tuple[type, ...], then: Callable[[Any], str | None] = lambda value: None) -> Any:
    """A field only resuming needs: a `kind` (a bool is no number), then whatever `then` finds wrong with it."""

    def problem(name: str, value: object) -> str | None:
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"{name!r}, which resuming needs, is missing or not a {getattr(kind, '__name__', 'number')}"
        return then(value)

    return _entry(problem, resume=True)


def _is_step(value: object) -> bool:
    return type(value) is int and 0 <= value < MAX_STEP


def _step_count(name: str, value: object) -> str | None:
    return None if _is_step(value) else f"{name!r} is not a step count (a whole number from 0 to 2**63 - 1)"


def _weights(name: str, value: object) -> str | None:
    named = isinstance(value, dict) and all(isinstance(k, str) and tensor_problem(v) is None for k, v in value.items())
    return None if named and value else f"{name!r} is not a set of named floating-point tensors"


def _model_config(name: str, value: object) -> str | None:
    # The settings of RECORDED_WHEN_SET are there only when set (GPTConfig.to_dict): a model's switches, and what a
    # model trained elsewhere brought.
    if isinstance(value, dict) and set(ALWAYS_RECORDED) <= set(value) <= {f.name for f in fields(GPTConfig)}:
        return None
    return (
        f"{name!r} is missing or does not hold exactly {', '.join(ALWAYS_RECORDED)} (and of "
        f"{', '.join(RECORDED_WHEN_SET)} those it sets)"
    )


def _generator_states(rng: dict) -> str | None:
    states = all(isinstance(rng.get(k), torch.Tensor) and rng[k].dtype == torch.uint8 for k in ("torch", "batches"))
    return None if states else "'rng' does not hold the random generators' states"


@dataclass(frozen=True)
class Checkpoint:
    """What train.py saves in ckpt.pt, in the order it is written (after the file's "format" and "format_version"):
    everything a resumed run needs to continue exactly, as plain tensors and values. `validate` checks a file read
    back against the same fields: first those every reader needs, then, to resume, the others."""

    model: dict[str, torch.Tensor] = _entry(_weights)  # the model's state_dict
    optimizer: dict = _for_resume(dict)  # the optimizer's state_dict
    model_config: dict = _entry(_model_config)  # GPTConfig.to_dict()
    train_config: dict = _for_resume(dict)  # TrainConfig.to_dict()
    tokenizer: dict | None = _entry(lambda name, value: None if isinstance(value, dict) else f"it has no {name!r}")
    step: int = _entry(_step_count)  # the optimizer steps done
    best_val_loss: float = _for_resume((float, int), lambda value: "'best_val_loss' is nan" if value != value else None)
    run_name: str = _for_resume(str)
    run_id: str | None = _entry(  # the run's identity (`trainer.runtime.new_run_id`); None in older checkpoints
        lambda name, value: None if value is None or isinstance(value, str) else f"{name!r} is not text", resume=True
    )
    eval_step: int | None = _entry(  # the step of the last evaluation, if any
        lambda name, value: None if value is None or _is_step(value) else f"{name!r} is not a step", resume=True
    )
    rng: dict[str, torch.Tensor] = _for_resume(dict, _generator_states)  # torch's and the batches' generators
    data: dict | None = _entry(lambda name, value: None)  # what the run trains on (`saved_settings` checks it)

    def contents(self) -> dict:
        """The dict ckpt.pt holds (but its format): every field by name, in order, its tensors as they are."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def checkpoint_path(path: str | Path) -> Path:
    path = Path(path)
    return path / CHECKPOINT if path.is_dir() else path


def read_torch(path: Path, kind: str = "checkpoint") -> object:
    """The contents of the PyTorch file `path`, on the CPU, memory-mapped where the file allows it (the zip format of
    torch 1.6 on), so a large file is not read whole before it is used."""
    ours = kind == "checkpoint"
    fix = "use an earlier copy or retrain" if ours else "use an intact copy"
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError:
            raise
        except Exception:  # what cannot be mapped (the format before torch 1.6, a damaged file) is read whole
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # naming the object it refused, unless the data is damaged
        named = re.search(r"GLOBAL (\S+)", str(exc))
        if named or "Can only create new object" in str(exc) or "call reduce for unrecognized function" in str(exc):
            found = named[1] if named else "an object of a class that is not a tensor"
            only = "only load checkpoints written by this trainer" if ours else "only tensors and plain values are read"
            raise CheckpointError(
                f"refusing {path}: it contains a pickled Python object ({found}), which could "
                f"run code when loaded; {only}"
            ) from None
        raise CheckpointError(
            f"{path} is not a readable {kind} (its pickled data is damaged); it may be truncated or corrupt: {fix}"
        ) from None
    except MemoryError:
        raise CheckpointError(
            f"not enough memory to load {path} ({path.stat().st_size:,} bytes); close other "
            f"programs or load it on a machine with more memory"
        ) from None
    except PermissionError as exc:
        raise CheckpointError(f"{cannot('read ' + kind, path, exc)}; check its permissions") from None
    except Exception:  # a damaged archive surfaces as many types (RuntimeError, OSError, KeyError, EOFError, ...)
        raise CheckpointError(f"{path} is not a readable {kind}; it may be truncated or corrupt: {fix}") from None


# --- reading a checkpoint ------------------------------------------------------------------------------------


def load_checkpoint(path: str | Path, contents: object = None) -> dict:
    """A checkpoint's contents (or `contents`, read already), refused unless this trainer wrote it (`validate` checks
    its structure)."""
    folder = Path(path) if Path(path).suffix != ".pt" else Path(path).parent  # where train.py would write it
    path = checkpoint_path(path)
    fix = (
        "point --out_dir at the folder that holds the ckpt.pt train.py wrote, or train one there first: python "
        f"train.py --out_dir={shlex.quote(str(folder))}"
    )
    head = read_bytes(path, "checkpoint", fix, CheckpointError, size=len(ZIP_MAGIC))
    if contents is None:
        if not head:
            raise CheckpointError(
                f"{path} is empty (0 bytes), perhaps from an interrupted copy; use an earlier copy or retrain"
            )
        if head != ZIP_MAGIC:
            raise CheckpointError(
                f"{path} is not a checkpoint written by this trainer (not a PyTorch archive); "
                f"give the ckpt.pt that train.py wrote"
            )
        contents = read_torch(path)
    if isinstance(contents, dict) and "format" not in contents and {"model", "iter_num"} <= set(contents):
        raise CheckpointError(
            f"{path} looks like a nanoGPT checkpoint (it holds 'model' and 'iter_num') but has no "
            f"'model_args', the model's sizes; it is damaged or was edited: use the ckpt.pt "
            f"nanoGPT's train.py wrote"
        )
    if not isinstance(contents, dict) or contents.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not a checkpoint written by this trainer; give the ckpt.pt that train.py wrote"
        )
    version = contents.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {version}, this trainer reads version "
            f"{FORMAT_VERSION}; use the trainer version that wrote it, or retrain"
        )
    return contents


def validate(checkpoint: dict, path: str | Path, *, for_resume: bool = False) -> GPTConfig:
    """The checkpoint's model config, after checking that everything a model (and, `for_resume`, a resumed run)
    reads from it is there with the right type."""
    problem = _structure_problem(checkpoint, for_resume)
    if problem is None:
        try:
            config = GPTConfig(**checkpoint["model_config"])
        except (TypeError, ValueError) as exc:
            problem = f"its model_config is invalid ({exc})"
        else:  # the sizes that decide every other shape, before a model far larger than its weights is allocated
            weights = checkpoint["model"]
            layers = {name.split(".")[1] for name in weights if name.startswith("blocks.")}
            sizes = {"wte.weight": (config.vocab_size, config.n_embd)}
            if config.absolute_positions:
                sizes["wpe.weight"] = (config.block_size, config.n_embd)
            problem = (
                f"its model_config says {config.n_layer} layers, its weights hold {len(layers)}"
                if len(layers) != config.n_layer
                else _mismatch(sizes, {name: tuple(weights[name].shape) for name in sizes if name in weights})
            )
    if problem is not None:
        raise unusable(path, problem)
    # Weights (and, to resume, optimizer moments) that are nan or inf would sample garbage, or make every
    # resumed step nan: a run that diverged never saves them, so such a file was damaged or made elsewhere.
    fix = "use an earlier checkpoint (ckpt.prev.pt?) or retrain"
    check_finite({key: checkpoint[key] for key in ("model", "optimizer")[: 1 + for_resume]}, path, fix)
    return config


def unusable(path: str | Path, problem: str) -> CheckpointError:
    return CheckpointError(
        f"{path} is not a usable checkpoint: {problem}; it was not written by this "
        f"trainer's train.py, or was edited: use the ckpt.pt that train.py wrote"
    )


def _mismatch(expected: dict[str, tuple], found: dict[str, tuple]) -> str | None:
    differ = sorted(set(expected) ^ set(found)) or [name for name in expected if expected[name] != found[name]]
    if not differ:
        return None
    name = differ[0]
    return (
        f"its weights do not fit its model_config ({name}: expected {expected.get(name, 'nothing')}, "
        f"found {found.get(name, 'nothing')})"
    )


def tensor_problem(value: object) -> str | None:
    """What keeps `value`, read from a file, from being weights, in words; None for a dense floating-point tensor
    with values (the meta device has none)."""
    if not isinstance(value, torch.Tensor):
        return f"is a {type(value).__name__}, not a tensor"
    if value.layout != torch.strided or value.is_meta:
        return f"is a {'meta' if value.is_meta else 'sparse'} tensor, not one holding every value"
    if not value.is_floating_point():
        return f"holds {value.dtype} values, not floating-point weights"
    return None


def _structure_problem(checkpoint: dict, for_resume: bool) -> str | None:
    """What is wrong with the first field of `Checkpoint` that `checkpoint` lacks or holds wrong: the fields every
    reader needs first, then (`for_resume`) those resuming needs; None when all are right."""
    for resume in (False, True)[: 1 + for_resume]:
        for entry in fields(Checkpoint):
            if entry.metadata["resume"] == resume:
                problem = entry.metadata["problem"](entry.name, checkpoint.get(entry.name))
                if problem is not None:
                    return problem
    return None


def check_finite(tensors: dict, path: str | Path, fix: str, prefix: str = "") -> None:
    """A `CheckpointError` naming the first tensor (nested dicts and lists searched, their names joined after
    `prefix`) holding nan or inf, as read from `path`, and saying `fix`."""
    for name, value in tensors.items():
        if isinstance(value, (dict, list, tuple)):
            check_finite(value if isinstance(value, dict) else dict(enumerate(value)), path, fix, f"{prefix}{name}.")
        elif isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            kinds = "/".join(k for k, f in (("nan", torch.isnan), ("inf", torch.isinf)) if bool(f(value).any()))
            raise CheckpointError(
                f"{path} holds numbers that are not finite ({prefix}{name} holds {bad:,} {kinds} "
                f"value{'s' if bad > 1 else ''} of {value.numel():,}); it comes from a run that diverged, or is "
                f"damaged: {fix}"
            )


def load_weights(model: GPT, weights: dict, path: str | Path) -> None:
    """`model.load_state_dict(weights)`, with a `CheckpointError` naming the first tensor that does not fit."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    problem = _mismatch(expected, {name: tuple(t.shape) for name, t in weights.items()})
    if problem is not None:
        raise unusable(path, problem)
    try:
        model.load_state_dict(weights)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: the saved weights do not fit the saved model_config "
            f"({' '.join(str(exc).split())[:200]}); use the ckpt.pt that train.py wrote"
        ) from None


def saved_settings(checkpoint: dict, path: str | Path) -> TrainConfig | None:
    """The settings the checkpoint records (its train_config and data record), checked as a config's are, so that
    nothing read from them is used unchecked; None for a checkpoint without (one a tool wrote)."""
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
        record_settings = {
            key: value
            for key, value in (data or {}).items()
            if key != "tokenizer" or value in TOKENIZERS or not isinstance(value, str) or "\x00" in value
        }
        saved_config({**saved, **record_settings}, "in its data record")
    except UsageError as exc:
        raise unusable(path, f"its {record} is invalid ({exc})") from None
    return config


# --- a checkpoint as a model -------------------------------------------------------------------------------


def load_gptwatch(source: Source, device: torch.device, dropout: float | None = None) -> Loaded:
    """A checkpoint train.py wrote (the file, or its folder) as a model and its tokenizer."""
    checkpoint = load_checkpoint(source.path, source.contents)
    path = checkpoint_path(source.path)  # the file, for messages
    config = validate(checkpoint, path)
    if dropout is not None:
        config = dataclasses.replace(config, dropout=dropout)
    try:
        tokenizer = tokenizer_from_meta(checkpoint["tokenizer"])
    except TokenizerMetaError as exc:  # others (GPT-2's BPE not loadable here) are not the checkpoint's fault
        raise CheckpointError(
            f"{path} holds no usable tokenizer ({exc}); use the ckpt.pt that train.py wrote"
        ) from None
    tokens = config.vocab_used or config.vocab_size  # the rows beyond vocab_used pad the vocabulary
    if tokenizer.vocab_size != tokens:
        raise CheckpointError(
            f"{path}: its tokenizer has {tokenizer.vocab_size} tokens but its model_config "
            f"{tokens}; use the ckpt.pt that train.py wrote"
        )
    sizes = f"block_size {config.block_size:,}, n_layer {config.n_layer}, n_embd {config.n_embd}"
    fix = "use a machine with more memory, or the ckpt.pt that train.py wrote if this one was edited"
    check_memory(load_bytes(config), device, f"{path}: its model ({sizes})", fix)
    with out_of_memory(
        lambda exc: CheckpointError(
            f"{path}: its model ({config.to_dict()}) does not fit in the memory of {device} "
            f"here; use --device=cpu, or a machine with more memory"
        )
    ):
        model = GPT(config)
        load_weights(model, checkpoint["model"], path)
        model.to(device).eval()
    return Loaded(model, tokenizer, checkpoint)


def load_bytes(config: GPTConfig) -> dict[str, int]:
    """A lower bound of what loading `config`'s model and sampling from it allocate besides the checkpoint's own
    tensors: the rotary tables and the sampling cache follow from block_size, which no "modern" tensor holds."""
    return {
        "weights": 4 * parameter_count(config),
        "rotary tables": 4 * config.n_layer * config.block_size * config.head_dim if config.modern else 0,
        "sampling cache": 4 * config.n_layer * config.block_size * 2 * config.n_embd,
    }


# --- writing a checkpoint -----------------------------------------------------------------------------------


def save_checkpoint(path: str | Path, checkpoint: Checkpoint | dict, keep_previous: str | Path | None = None) -> None:
    """Atomically replaces `path` (nothing, or a checkpoint: `CHECKPOINT_FILE`) with `checkpoint` (train.py's
    `Checkpoint`, or the dict a tool writes: a model without what resuming needs). With `keep_previous`, the
    checkpoint being replaced survives under that name (hard-linked just before the swap, so `path` itself is never
    missing), over nothing or a checkpoint."""
    path = Path(path)
    if isinstance(checkpoint, Checkpoint):
        checkpoint = checkpoint.contents()
    contents = {"format": FORMAT, "format_version": FORMAT_VERSION, **checkpoint}  # "format" first: its header

    def keep() -> None:  # a hard link (what stands there replaced, never followed), or a copy where there are none
        if keep_previous is None or not path.exists():
            return
        previous = CHECKPOINT_FILE.check(keep_previous, "choose another --out_dir", "the earlier run's checkpoint")
        previous.unlink(missing_ok=True)
        try:
            os.link(path, previous, follow_symlinks=False)
        except OSError:  # a filesystem without hard links
            with open(path, "rb") as source:  # streamed: a checkpoint can be large
                replace_file(previous, lambda fh: shutil.copyfileobj(source, fh))

    CHECKPOINT_FILE.check(path, "choose another --out_dir", "the checkpoint")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # replace_file leaves no half-written temporary file, also on a second Ctrl-C mid-save
        replace_file(path, lambda fh: torch.save(contents, fh), before_replace=keep)
        with contextlib.suppress(OSError):  # makes the rename itself durable; not every platform opens a folder
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        kept = "; the previous checkpoint is intact" if path.is_file() else ""
        raise CheckpointError(
            cannot_write(f"checkpoint {path}", path, exc, "choose a writable --out_dir") + kept
        ) from None


def torch_file(what: str, name: str) -> Kind:
    """The kind of a PyTorch file whose first key is "format" and its value `name` (a checkpoint, an export), read
    where torch.save puts it: at the start of the archive's first record, data.pkl, which it stores uncompressed."""
    pickled = pickle.dumps({"format": name, "format_version": 0}, protocol=torch.serialization.DEFAULT_PROTOCOL)
    expected = pickled[: pickled.index(name.encode()) + len(name)]

    def bears(head: bytes) -> bool:
        if len(head) < 30 or not head.startswith(ZIP_MAGIC):
            return False
        method, (name_size, extra_size) = struct.unpack_from("<H", head, 8)[0], struct.unpack_from("<HH", head, 26)
        record, data = head[30 : 30 + name_size], head[30 + name_size + extra_size :]
        return method == 0 and record.endswith(b"/data.pkl") and data.startswith(expected)

    return Kind(what, bears)


CHECKPOINT_FILE = torch_file("a gptwatch checkpoint", FORMAT)


def previous_path(path: Path) -> Path:
    """Where a new run keeps the earlier run's checkpoint it replaces."""
    return path.with_name("ckpt.prev.pt")


# Any file no other format recognises is taken for a checkpoint: its reader says what is wrong with it.
GPTWATCH = Format("gptwatch", "gptwatch", is_file_of=lambda path, contents: True, load=load_gptwatch)
