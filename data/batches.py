"""Random training windows from the token files, seeded and reproducible."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(eq=False)
class Batches:
    """Draws (x, y) pairs from `splits` ("train" and "val" ids, each at least block_size + 2 long, as
    `Prepared.splits` gives them): y is x shifted one token left.

    Training batches come from one generator whose state is saved with a checkpoint, so a resumed run sees
    the batches it would have seen. Evaluation batches come from a generator re-seeded each time, so every
    evaluation scores the same windows and the numbers compare across steps.
    """

    splits: dict[str, np.ndarray]
    block_size: int
    batch_size: int
    device: torch.device
    seed: int
    rank: int = 0

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.seed + 1000 * self.rank)
        self._offsets = np.arange(self.block_size + 1)

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
        generator = torch.Generator().manual_seed(self.seed + 10_000)
        for _ in range(count):
            yield self._draw(split, generator)
