"""`sample.py --export {tl,hf} PATH`: a loaded checkpoint written where TransformerLens or Hugging Face
transformers load it.

The checks run cheapest and most certain first, and all before anything is written: the target can
hold every part of the model exactly (`interop.parts`), the path can take the export without
destroying anything that is not an earlier export, then the optional libraries are there. After
converting, both models run on the same random tokens and the export is refused if their logits
differ by more than `TOLERANCE`, so a file that computes something else is never written. The file or
folder is written beside its final place and moved there whole, so a failure leaves what was there.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from checkpoints import Loaded
from errors import UserError
from files import cannot, what_stands_at, writable_folder
from interop import optional
from interop.hf_tokenizer import hf_tokenizer
from interop.huggingface import to_hf_model
from interop.parts import TARGETS, check_supported
from interop.transformerlens import is_earlier_export, saved_contents, to_hooked_transformer
from model.gpt import GPT

TOLERANCE = 1e-4            # float32 logits; the tests find about 1e-5
MARKER = "gptwatch_export.json"  # in every folder `--export hf` writes: what it is, its files, where it came from


@dataclass
class Exported:
    """What an export wrote, for the report: where, as what, and the largest logit difference found."""

    path: Path
    what: str
    logits_diff: float
    tokens: tuple[int, int]


def export(loaded: Loaded, target: str, path: str | Path, source: str) -> Exported:
    """Writes `loaded`'s model for `target` ("tl": one file; "hf": a folder) at `path`."""
    model = loaded.model.float().cpu().eval()
    check_supported(model.config, target)
    path = Path(path)
    if target == "tl":
        check_tl_path(path)
        return _export_tl(loaded, model, path, source)
    check_hf_path(path)
    return _export_hf(loaded, model, path, source)


# --- the path ----------------------------------------------------------------------------------------

def check_tl_path(path: Path) -> None:
    """`path` can take the TransformerLens file: nothing there, or an earlier one, in a writable folder."""
    problem = what_stands_at(path)
    if problem == "a directory":
        raise UserError(f"{path} is a directory, where --export tl writes one file; give a file path, e.g. "
                        f"{path / 'model.tl.pt'}")
    if problem is None and not is_earlier_export(path):
        raise UserError(f"{path} exists and is not an earlier --export tl file; remove it or choose another path "
                        f"(an export replaces only its own earlier file)")
    if problem is not None and not problem.startswith("missing"):
        raise UserError(f"{path} is {problem}, where --export tl writes its file; choose another path")
    _writable_parent(path)


def check_hf_path(path: Path) -> None:
    """`path` can take the Hugging Face folder: nothing there, an empty folder or an earlier export."""
    problem = what_stands_at(path)
    if problem is None or (problem != "a directory" and not problem.startswith("missing")):
        raise UserError(f"{path} is {'a file' if problem is None else problem}; --export hf writes a folder: choose "
                        f"a new folder name")
    if problem == "a directory" and not is_earlier_hf_export(path):
        try:
            empty = not any(path.iterdir())
        except OSError as exc:
            raise UserError(f"{cannot('read folder', path, exc)}; choose another folder") from None
        if not empty:
            raise UserError(f"{path} is a folder that is not empty and holds no earlier export ({MARKER}); choose "
                            f"a new or empty folder (an export replaces only its own earlier folder)")
    _writable_parent(path)


def is_earlier_hf_export(folder: Path) -> bool:
    """A folder `--export hf` wrote: its marker, and no file but those the marker lists (so nothing a
    user added is replaced)."""
    try:
        names = {p.name for p in folder.iterdir()}
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("format") != "gptwatch-huggingface":
        return False
    files = marker.get("files")
    return isinstance(files, list) and names <= {MARKER, *map(str, files)}


def _writable_parent(path: Path) -> None:
    try:
        writable_folder(path.parent, "export")
    except UserError:
        raise UserError(f"cannot write {path}: its folder {path.parent} cannot be created or written to; choose a "
                        f"writable path") from None


# --- TransformerLens -------------------------------------------------------------------------------

def _export_tl(loaded: Loaded, model: GPT, path: Path, source: str) -> Exported:
    optional.transformer_lens()
    hooked = to_hooked_transformer(model, device="cpu")
    diff, tokens = _logits_diff(model, hooked)
    contents = saved_contents(model, hooked, _source(loaded, source))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        torch.save(contents, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as a RuntimeError
        tmp.unlink(missing_ok=True)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:120]
        raise UserError(f"cannot write {path} ({why}); free disk space or choose another path") from None
    return Exported(path, "TransformerLens HookedTransformer (config and state dict)", diff, tokens)


# --- Hugging Face -------------------------------------------------------------------------------------

def _export_hf(loaded: Loaded, model: GPT, folder: Path, source: str) -> Exported:
    transformers = optional.transformers()
    hf = to_hf_model(model, eos_token_id=getattr(loaded.tokenizer, "eot_id", None))
    diff, tokens = _logits_diff(model, lambda idx: hf(idx).logits)
    tokenizer = hf_tokenizer(loaded.tokenizer)
    marker = {"format": "gptwatch-huggingface", "class": type(hf).__name__, **_source(loaded, source)}
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    progress = transformers.utils.logging
    shown = progress.is_progress_bar_enabled()
    progress.disable_progress_bar()  # a bar for writing one small file is noise in a command's output
    try:
        hf.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        marker["files"] = sorted(p.name for p in tmp.iterdir())
        (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        _same_mode_as(tmp / MARKER, tmp)
        if folder.exists():  # empty, or an earlier export: checked above
            os.replace(folder, old)
        os.replace(tmp, folder)
    except OSError as exc:
        if old.exists() and not folder.exists():
            os.replace(old, folder)
        raise UserError(f"{cannot('write the Hugging Face folder', folder, exc)}; free disk space or choose another "
                        f"folder") from None
    finally:
        if shown:
            progress.enable_progress_bar()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return Exported(folder, f"Hugging Face {type(hf).__name__} with its tokenizer", diff, tokens)


def _same_mode_as(reference: Path, folder: Path) -> None:
    """Every file in `folder` gets the permissions of `reference`, a file written the usual way (the umask's):
    safetensors writes the weights readable by their owner alone (0600), the other files as any file (0644)."""
    mode = reference.stat().st_mode & 0o777
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


# --- shared -------------------------------------------------------------------------------------------

def _source(loaded: Loaded, source: str) -> dict:
    return {"source": {"checkpoint": str(source), "step": loaded.checkpoint.get("step")},
            "tokenizer": loaded.tokenizer.to_meta()}


def _logits_diff(model: GPT, run, batch: int = 2, seed: int = 0) -> tuple[float, tuple[int, int]]:
    """The largest |logit difference| between `model` and `run` (the converted model) on `batch` random
    sequences of up to 64 tokens; `UserError` beyond `TOLERANCE`, so a wrong export is never written."""
    length = min(model.config.block_size, 64)
    idx = torch.randint(model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours, _ = model(idx, all_logits=True)
        theirs = run(idx)
    diff = float((ours.double() - theirs.double()).abs().max())
    if not diff <= TOLERANCE:
        raise UserError(f"the converted model's logits differ from the checkpoint's by {diff:.3g} (more than "
                        f"{TOLERANCE:g}); nothing was written. Please report this with the checkpoint's model_config")
    return diff, (batch, length)


def report(exported: Exported, target: str) -> str:
    """What `sample.py --export` prints: what it wrote, how close it is, and the lines that load it."""
    path = str(exported.path)
    if target == "tl":
        load = (f"  import torch; from transformer_lens import HookedTransformer\n"
                f"  saved = torch.load({path!r})\n"
                f"  model = HookedTransformer(saved[\"config\"]); model.load_state_dict(saved[\"state_dict\"])")
    else:
        load = (f"  from transformers import AutoModelForCausalLM, AutoTokenizer\n"
                f"  model = AutoModelForCausalLM.from_pretrained({path!r}); "
                f"tokenizer = AutoTokenizer.from_pretrained({path!r})")
    return (f"wrote {path}: {exported.what}\n"
            f"checked: max |logit difference| from the checkpoint {exported.logits_diff:.2g} on {exported.tokens[0]} "
            f"random sequences of {exported.tokens[1]} tokens\n"
            f"load it in {TARGETS[target]}:\n{load}")
