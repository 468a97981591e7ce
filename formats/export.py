"""`sample.py --export {tl,hf} PATH`: a loaded checkpoint written where TransformerLens or Hugging Face
transformers load it. The checks run cheapest and most certain first, and all before anything is written: the
target can hold every part of the model exactly, the path can take the export without destroying anything that is
not an earlier export, the optional libraries are there, and the converted model's logits are the checkpoint's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from errors import UserError
from files import (
    cannot,
    destination,
    remove_dead_leftovers,
    replace_file,
    replace_folder,
    what_stands_at,
    writable_folder,
    write_error,
    write_fix,
)
from formats.checkpoint import CheckpointError, Loaded, is_torch_archive, read_torch
from formats.huggingface import MARKER, hf_tokenizer, library, to_hf_model
from formats.layout import TARGETS, check_supported
from formats.transformerlens import hooked_config, to_hooked_transformer
from model.gpt import GPT
from parsing import parse_json

TL_FORMAT, HF_FORMAT = "gptwatch-transformerlens", "gptwatch-huggingface"  # in what each export writes
TOLERANCE = 1e-4  # float32 logits; the tests find about 1e-5


def export(loaded: Loaded, target: str, path: Path, source: str) -> str:
    """Writes `loaded`'s model for `target` ("tl": one file; "hf": a folder) at `path` (`export_path`'s); what
    `sample.py --export` prints: what it wrote, how close it is, and the lines that load it."""
    model = loaded.model.float().cpu().eval()
    check_supported(model.config, target)
    remove_dead_leftovers(path)  # before the checks: what a killed export left inside is no user's file
    shown = str(path)
    record = {
        "source": {"checkpoint": str(source), "step": loaded.checkpoint.get("step")},  # in what is written
        "tokenizer": loaded.tokenizer.to_meta(),
    }
    check_path(path, target)
    if target == "tl":
        hooked = to_hooked_transformer(model, device="cpu")
        diff, (batch, length) = _logits_diff(model, hooked)
        # the config and state dict TransformerLens loads, plain values and tensors only (weights_only=True reads it)
        contents = {
            "format": TL_FORMAT,
            "format_version": 1,
            "config": hooked_config(model.config),
            "state_dict": {name: t.detach().cpu() for name, t in hooked.state_dict().items()},
            **record,
        }
        try:
            replace_file(path, lambda fh: torch.save(contents, fh))
        except OSError as exc:
            raise _write_failed(path, exc, "the TransformerLens file") from None
        what = "TransformerLens HookedTransformer (config and state dict)"
        load = (
            f"  import torch; from transformer_lens import HookedTransformer\n"
            f"  saved = torch.load({shown!r})\n"
            f'  model = HookedTransformer(saved["config"]); model.load_state_dict(saved["state_dict"])'
        )
    else:
        what, diff, (batch, length) = _export_hf(loaded, model, path, record)
        load = (
            f"  from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"  model = AutoModelForCausalLM.from_pretrained({shown!r}); "
            f"tokenizer = AutoTokenizer.from_pretrained({shown!r})"
        )
    return (
        f"wrote {shown}: {what}\nchecked: max |logit difference| from the checkpoint {diff:.2g} on {batch} "
        f"random sequences of {length} tokens\nload it in {TARGETS[target]}:\n{load}"
    )


# --- the path ----------------------------------------------------------------------------------------


def export_path(target: str, text: str) -> Path:
    """The path `--export TARGET TEXT` writes: a file for tl, a folder for hf."""
    if target == "tl":
        example = (Path(text) if text.endswith(("/", os.sep, ".")) else Path(text).parent) / "model.tl.pt"
        return destination(text, "--export tl", folder=False, fix=f"give a file path, e.g. {example}")
    return destination(text, "--export hf", folder=True, fix="give a folder name, e.g. model-hf")


def check_path(path: Path, target: str) -> None:
    """`path` can take the export: nothing, an earlier export, a link (replaced, not followed), an empty folder (hf)."""
    problem = what_stands_at(path, follow_links=False)
    other = problem not in (None, "a directory", "a symbolic link") and not problem.startswith("missing")
    if target == "tl":
        if problem == "a directory":
            raise UserError(
                f"{path} is a directory, where --export tl writes one file; give a file path, e.g. "
                f"{path / 'model.tl.pt'}"
            )
        if problem is None and not is_earlier_export(path, "tl"):
            raise UserError(
                f"{path} exists and is not an earlier --export tl file; remove it or choose another "
                f"path (an export replaces only its own earlier file)"
            )
        if other:
            raise UserError(f"{path} is {problem}, where --export tl writes its file; choose another path")
    elif problem is None or other:
        raise UserError(
            f"{path} is {'a file' if problem is None else problem}; --export hf writes a folder: choose "
            f"a new folder name"
        )
    elif problem == "a directory" and not is_earlier_export(path, "hf"):
        try:
            empty = not any(path.iterdir())
        except OSError as exc:
            raise UserError(f"{cannot('read folder', path, exc)}; choose another folder") from None
        if not empty:
            raise UserError(
                f"{path} is a folder that is not empty and holds no earlier export ({MARKER}); choose "
                f"a new or empty folder (an export replaces only its own earlier folder)"
            )
    try:
        writable_folder(path.parent, "export")
    except UserError:
        raise UserError(
            f"cannot write {path}: its folder {path.parent} cannot be created or written to; choose a writable path"
        ) from None


def is_earlier_export(path: Path, target: str) -> bool:
    """Whether `path` holds what `--export target` wrote, which a new export may replace: for hf, a folder with its
    marker and no file but those the marker lists (nothing a user added is replaced)."""
    if target == "tl":
        try:
            saved = read_torch(path) if is_torch_archive(path) else None
        except CheckpointError:  # unreadable, damaged, or holding objects: not an export to replace silently
            return False
        return isinstance(saved, dict) and saved.get("format") == TL_FORMAT
    try:
        names = {p.name for p in path.iterdir()}
        marker = parse_json((path / MARKER).read_bytes())
    except (OSError, ValueError):  # no folder, no marker, or a marker that is not JSON
        return False
    files = marker.get("files") if isinstance(marker, dict) and marker.get("format") == HF_FORMAT else None
    return isinstance(files, list) and names <= {MARKER, *map(str, files)}


def _write_failed(path: Path, exc: OSError, what: str) -> UserError:
    return UserError(f"cannot write {what} {path}: {write_error(exc, path)}; {write_fix(exc, 'choose another path')}")


def _export_hf(loaded: Loaded, model: GPT, folder: Path, record: dict) -> tuple[str, float, tuple[int, int]]:
    hf = to_hf_model(model, eos_token_id=getattr(loaded.tokenizer, "eot_id", None))
    diff, tokens = _logits_diff(model, lambda idx: hf(idx).logits)
    tokenizer = hf_tokenizer(loaded.tokenizer)
    marker = {"format": HF_FORMAT, "class": type(hf).__name__, **record}

    def write(staging: Path) -> None:
        hf.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        marker["files"] = sorted(p.name for p in staging.iterdir())
        (staging / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        # Every file gets the permissions of the marker, written the usual way (the umask's): safetensors writes
        # the weights readable by their owner alone (0600), the other files as any file (0644).
        mode = (staging / MARKER).stat().st_mode & 0o777
        for path in staging.iterdir():
            if path.is_file() and not path.is_symlink():
                path.chmod(mode)

    progress = library("transformers", "exporting to Hugging Face").utils.logging  # to_hf_model imported it
    shown = progress.is_progress_bar_enabled()
    progress.disable_progress_bar()  # a bar for writing one small file is noise in a command's output
    try:
        replace_folder(folder, write, last=MARKER)
    except OSError as exc:
        raise _write_failed(folder, exc, "the Hugging Face folder") from None
    finally:
        if shown:
            progress.enable_progress_bar()
    return f"Hugging Face {type(hf).__name__} with its tokenizer", diff, tokens


def _logits_diff(model: GPT, run, batch: int = 2, seed: int = 0) -> tuple[float, tuple[int, int]]:
    """The largest |logit difference| between `model` and `run` (the converted model) on `batch` random sequences of
    up to 64 tokens, and those sizes; `UserError` beyond `TOLERANCE`, so a wrong export is never written."""
    length = min(model.config.block_size, 64)
    idx = torch.randint(model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours, _ = model(idx, all_logits=True)
        theirs = run(idx)
    diff = float((ours.double() - theirs.double()).abs().max())
    if not diff <= TOLERANCE:
        raise UserError(
            f"the converted model's logits differ from the checkpoint's by {diff:.3g} (more than "
            f"{TOLERANCE:g}); nothing was written. Please report this with the checkpoint's model_config"
        )
    return diff, (batch, length)
