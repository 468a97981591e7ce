"""Random training windows from the token files, seeded and reproducible."""

from __future__ import annotations

import math

import numpy as np
import torch

from data.prepare import Prepared
from errors import UserError


class Batches:
    """Draws (x, y) pairs: y is x shifted one token left.

    Training batches come from one generator whose state is saved with a
    checkpoint, so a resumed run sees the batches it would have seen.
    Evaluation batches come from a generator re-seeded each time, so every
    evaluation scores the same windows and the numbers compare across steps.
    """

    def __init__(self, prepared: Prepared, block_size: int, batch_size: int, device: torch.device,
                 seed: int, rank: int = 0) -> None:
        self.splits = {split: prepared.tokens(split) for split in ("train", "val")}
        for split, tokens in self.splits.items():
            if len(tokens) < block_size + 2:
                raise _too_short(split, {s: len(t) for s, t in self.splits.items()}, block_size, prepared.meta)
        self.block_size = block_size
        self.batch_size = batch_size
        self.device = device
        self.eval_seed = seed + 10_000
        self.generator = torch.Generator().manual_seed(seed + 1000 * rank)
        self._offsets = np.arange(block_size + 1)

    def _draw(self, split: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.splits[split]
        starts = torch.randint(len(tokens) - self.block_size - 1, (self.batch_size,), generator=generator)
        windows = torch.from_numpy(tokens[starts.numpy()[:, None] + self._offsets].astype(np.int64))
        x, y = windows[:, :-1], windows[:, 1:]
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x.to(self.device), y.to(self.device)

    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._draw("train", self.generator)

    def eval_batches(self, split: str, count: int):
        generator = torch.Generator().manual_seed(self.eval_seed)
        for _ in range(count):
            yield self._draw(split, generator)

    def state(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def _too_short(split: str, sizes: dict[str, int], block_size: int, meta: dict) -> UserError:
    """Why `split` is shorter than one window, and the fix that helps: a longer text or a smaller block
    when the whole text is short, otherwise a split of the text that leaves each part enough."""
    need = block_size + 2
    total = sizes["train"] + sizes["val"]
    fraction = meta.get("val_fraction", 0.1)
    problem = f"the {split} split has {sizes[split]:,} tokens, fewer than block_size + 2 = {need}"
    if total < 2 * need:
        more = ("raise --corpus_sentences" if str(meta.get("source", "")).startswith("pronouns(")
                else "use a longer text")
        # Each fix must work at the split the user has, or name the split it needs.
        fixes = [f"{more} (at least {math.ceil(need / min(fraction, 1 - fraction)):,} tokens at "
                 f"--val_fraction={fraction:g})"]
        if min(sizes.values()) - 2 >= 1:
            fixes.append(f"a --block_size of at most {min(sizes.values()) - 2}")
        elif total // 2 - 2 >= 1:
            fixes.append(f"--val_fraction=0.5 with a --block_size of at most {total // 2 - 2}")
        return UserError(f"{problem}: the text has {total:,} tokens in all, too few for both splits; "
                         f"{' or '.join(fixes)}")
    if split == "val":  # the smallest fraction (to 2 significant digits) that gives val a window
        suggested = float(f"{need / total:.2g}")
        while int(total * suggested) < need:
            suggested = float(f"{suggested * 1.1:.2g}")
        return UserError(f"{problem}: --val_fraction={fraction:g} of {total:,} tokens is too small; use "
                         f"--val_fraction={suggested:g} or more")
    largest = float(f"{(total - need) / total:.2g}")
    while total - int(total * largest) < need:
        largest = float(f"{largest * 0.9:.2g}")
    return UserError(f"{problem}: --val_fraction={fraction:g} leaves too little for training; use "
                     f"--val_fraction={largest:g} or less")
