"""`python train.py` without the attention watch and the text sample: what the trainer alone costs.

    python bench/unwatched.py configs/shakespeare_char.toml --out_dir=out/unwatched

Runs train.py as a script, with `watch.callback.AttentionWatch` replaced by a callback that does nothing and
`--sample_tokens=0` (no text sample), so the loop, the loss evaluations, the scalars, the checkpoints and the
printed lines are a real run's. Timed as a whole process beside nanoGPT's recipe and the watched run, it says
how much of a run the watch costs (docs/results.md, "What the watch costs").
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(REPO))

import watch.callback  # noqa: E402
from trainer.trainer import Callback  # noqa: E402


class Unwatched(Callback):
    """Stands in for AttentionWatch: no passes, no heatmaps, no sentences to offer the end-of-run sample command."""

    texts: list[str] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


if __name__ == "__main__":
    watch.callback.AttentionWatch = Unwatched
    sys.argv = [str(REPO / "train.py"), *sys.argv[1:], "--sample_tokens=0"]
    runpy.run_path(sys.argv[0], run_name="__main__")
