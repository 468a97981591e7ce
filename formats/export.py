"""`sample.py --export TARGET PATH`: a loaded checkpoint written where another library loads it, by a `Format` that
is an export target (formats/sources.py's `TARGETS`: tl, TransformerLens's file; hf, a Hugging Face folder), and
what every target shares. The checks run cheapest and most certain first, and all before anything is written: the
target can hold every part of the model exactly, the path can take the export without destroying anything that is
not an earlier export, the optional libraries are there, and the converted model's logits are the checkpoint's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from common.errors import UserError
from common.files import remove_dead_leftovers, what_stands_at, writable_folder
from formats.format import Format, Loaded
from model.config import GPTConfig
from model.gpt import GPT

TOLERANCE = 1e-4  # float32 logits; the tests find about 1e-5


class Unsupported(UserError):
    """A model with a part the target has no exact equivalent for."""


def export(loaded: Loaded, target: Format, path: Path, source: str) -> str:
    """Writes `loaded`'s model for `target` at `path` (the target's `destination`); what `sample.py --export`
    prints: what it wrote, how close it is, and the lines that load it."""
    model = loaded.model.float().cpu().eval()
    target.check_supported(model.config)
    remove_dead_leftovers(path)  # before the checks: what a killed export left inside is no user's file
    record = {
        "source": {"checkpoint": str(source), "step": loaded.checkpoint.get("step")},  # in what is written
        "tokenizer": loaded.tokenizer.to_meta(),
    }
    check_path(path, target)
    what, checked, usage = target.write(loaded, model, path, record)
    return f"wrote {path}: {what}\nchecked: {checked}\nload it in {target.title}:\n{usage}"


def check_path(path: Path, target: Format) -> None:
    """`path` can take the export: nothing, or what `target` may replace there (its own earlier export; never a
    link, as at every output)."""
    problem = what_stands_at(path, follow_links=False)
    if problem is None or not problem.startswith("missing"):  # what stands there (a file, a link), the target judges
        target.check_path(path, problem)
    try:
        writable_folder(path.parent, "export")
    except UserError:
        raise UserError(
            f"cannot write {path}: its folder {path.parent} cannot be created or written to; choose a writable path"
        ) from None


# --- what every target does ------------------------------------------------------------------------------------


def check_positions(config: GPTConfig, title: str, kinds: str) -> None:
    """`Unsupported` for relative positions, which no target holds: `kinds`, the positions `title` has."""
    if config.relative_positions:
        raise Unsupported(
            f"cannot export this model to {title} exactly: its positions are a learned bias "
            f"per head and distance in each attention layer (relative_positions=true), and "
            f"{title} has {kinds}, none of them that; to export, train with "
            f"--relative_positions=false"
        )


def same_logits(model: GPT, run: Callable[[torch.Tensor], torch.Tensor], batch: int = 2, seed: int = 0) -> str:
    """How close `run` (the converted model: token ids -> logits) comes to `model` on `batch` random sequences of up
    to 64 tokens, in words; `UserError` beyond `TOLERANCE`, so a wrong export is never written."""
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
    return f"max |logit difference| from the checkpoint {diff:.2g} on {batch} random sequences of {length} tokens"
