"""A run's checkpoints: where they go (`CheckpointWriter`, which keeps an earlier run's), and continuing one
(`resume`). The format itself, written and read, is formats/checkpoint.py's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cli import UsageError, warn
from config import TrainConfig
from data.prepare import Prepared
from files import clear_for_file, inside_name, writable_folder
from formats.checkpoint import CheckpointError, load_weights, previous_path, remove_stale_temp_files, save_checkpoint
from model.config import IMPORTED_FIELDS, MODEL_KEYS, GPTConfig
from model.gpt import GPT


def data_identity(cfg: TrainConfig, data: Prepared) -> dict:
    """What defines the data a run trains and validates on: the source text's sha256, how it was split and
    tokenized, and where its prepared files are. A checkpoint records it; a resumed run must match it."""
    meta = data.meta
    return {"dataset": cfg.dataset, "source": meta.get("source"), "source_sha256": meta.get("source_sha256"),
            # the tokenizer's name in the prepared folder's: a fine-tuned model's vocabulary has its own
            "tokenizer": meta.get("vocabulary", cfg.tokenizer), "val_fraction": cfg.val_fraction,
            "data_dir": cfg.data_dir, "folder": str(data.folder)}


def resume(cfg: TrainConfig, checkpoint: dict, path: Path, data: Prepared, model: GPT, optimizer: Any,
           batches: Any) -> None:
    """Continues `checkpoint` (read from `path`) in this run: refuses what this run's settings, its data and its
    model cannot continue, then puts back the weights, the optimizer's state and the random generators. The
    optimizer's settings (betas, weight decay) stay this config's; only its state (moments, momentum) comes from
    the checkpoint."""
    check_resume_compatible(cfg, checkpoint, data.tokenizer.to_meta(), model.config)
    check_same_data(checkpoint, data_identity(cfg, data), path)
    problem = inside_name(checkpoint["run_name"]) if not cfg.run_name else None
    if problem is not None:  # the resumed run would write its TensorBoard logs to log_dir/run_name
        raise CheckpointError(f"{path} holds the run name {checkpoint['run_name']!r}, which {problem}, so its "
                              f"TensorBoard logs would go outside --log_dir; resume with --run_name=NAME")
    load_weights(model, checkpoint["model"], path)
    parts = getattr(optimizer, "optimizers", None)  # trainer.optim.Optimizers: several, saved under "0", "1"
    try:
        saved = checkpoint["optimizer"]
        for opt, state in [(opt, saved[str(i)]) for i, opt in enumerate(parts)] if parts else [(optimizer, saved)]:
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
        batches.load_state(checkpoint["rng"]["batches"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
    except (KeyError, IndexError, RuntimeError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: its optimizer or random-generator state does not fit this model "
                              f"({' '.join(str(exc).split())[:200]}); resume from the ckpt.pt that train.py wrote, "
                              f"or start a new --out_dir") from None


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


def check_resume_compatible(cfg: TrainConfig, checkpoint: dict, tokenizer_meta: dict, model_config: GPTConfig) -> None:
    """A UsageError naming the first setting that differs from the checkpoint's in a way resuming cannot absorb:
    this run's, or that of the model it builds (`model_config`) which a model trained elsewhere brought."""
    theirs = GPTConfig(**checkpoint["model_config"])   # a switch it does not record (an older checkpoint) is off
    if cfg.model.block_size > theirs.block_size:  # a smaller one just trains on shorter windows
        raise UsageError(f"--block_size={cfg.model.block_size} is larger than the {theirs.block_size} the checkpoint "
                         f"was trained with; resume with --block_size={theirs.block_size} or start a new out_dir")
    for key in MODEL_KEYS:   # the vocabulary is checked through the tokenizer
        if getattr(theirs, key) != getattr(cfg.model, key):
            raise UsageError(f"config key '{key}' is {getattr(cfg.model, key)!r} but the checkpoint was trained with "
                             f"{getattr(theirs, key)!r}; use the same value to resume, or a new --out_dir")
    for key in IMPORTED_FIELDS:   # query/key/value biases, GPT-2's GELU, padding rows: what init_from brought
        if getattr(theirs, key) != getattr(model_config, key):
            raise UsageError(f"the checkpoint's model has {key}={getattr(theirs, key)!r} but this run's has "
                             f"{getattr(model_config, key)!r}: they started from different models; resume with "
                             f"the init_from it was trained from, or start a new --out_dir")
    saved_optimizer = checkpoint["train_config"].get("optimizer", "adamw")
    if saved_optimizer != cfg.optimizer:  # the optimizer states would not fit
        raise UsageError(f"config key 'optimizer' is {cfg.optimizer!r} but the checkpoint was trained with "
                         f"{saved_optimizer!r}; use the same value to resume, or a new --out_dir")
    if checkpoint["tokenizer"] != tokenizer_meta:
        raise UsageError("the checkpoint's vocabulary does not match this data's; resume with the dataset and "
                         "tokenizer it was trained on, or start a new --out_dir")


class CheckpointWriter:
    """A run's saves to `path`. Made before the run starts, it checks that out_dir can be written, that nothing
    but a checkpoint stands at `path` (found now, not at the first save) nor, when the run keeps an earlier one,
    at ckpt.prev.pt, and removes temporary files of a killed save. The first save of a run that did not
    `resume` keeps the checkpoint it replaces (an earlier run's) as ckpt.prev.pt, so a new run never silently
    destroys the last one; only at that first save, so a run that fails before saving leaves everything in
    place. `guard`, when set, is called before every save and raises when this run may no longer write there
    (its out_dir lock was lost: `RunLock.check`)."""

    def __init__(self, path: Path, *, resume: bool) -> None:
        self.path = path
        self.keep_previous = not resume and path.is_file()   # looked at once: preparing data can take minutes
        self.saved_step: int | None = None  # step of the checkpoint on disk from this run (or the one resumed)
        self.guard: Callable[[], None] | None = None   # set by the command that holds the run's lock
        writable_folder(path.parent, "out_dir")
        fix = "move it away or choose another --out_dir"
        clear_for_file(path, "this run's checkpoint", fix)
        if self.keep_previous:
            clear_for_file(previous_path(path), "the earlier run's checkpoint", fix, follow_links=False)
        remove_stale_temp_files(path)

    def save(self, checkpoint: dict, step: int) -> None:
        if self.guard is not None:
            self.guard()
        previous = previous_path(self.path) if self.keep_previous else None
        save_checkpoint(self.path, checkpoint, keep_previous=previous)
        if previous is not None:
            self.keep_previous = False
            warn(f"{self.path} held an earlier run (this one has no --resume); kept it as {previous}")
        self.saved_step = step
