"""nanoGPT, the reference, run beside ours on the same machine in the same benchmark run.

`../shared/anchors/nanogpt/` holds nanoGPT's recipe files unchanged (MIT licence, in that
folder). `prepare()` copies them into `bench/out/.nanogpt/`, puts Tiny Shakespeare there as
`data/shakespeare_char/input.txt` and runs nanoGPT's own `prepare.py` on it, so its `train.py`
and `sample.py` then run exactly as its README's CPU recipe says:

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
        --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
        --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

Nothing of it is imported into this project; its output is read from the lines it prints.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

from bench.harness import REPO, SCRATCH, run_child

ANCHOR = REPO.parent / "shared" / "anchors" / "nanogpt"
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
HOME = SCRATCH / ".nanogpt"  # hidden: a copy of another project's code, not ours to lint or scan
RECIPE = [
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--max_iters=2000",
    "--lr_decay_iters=2000",
    "--dropout=0.0",
]
RECIPE_TOKENS_PER_STEP = 12 * 64
EVAL_LINE = re.compile(r"^step (\d+): train loss ([0-9.]+), val loss ([0-9.]+)")
ITER_LINE = re.compile(r"^iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms")


def available() -> str | None:
    """None when nanoGPT can run here, else why not."""
    if not (ANCHOR / "train.py").is_file():
        return f"nanoGPT's files are not at {ANCHOR}"
    if not SHAKESPEARE.is_file():
        return f"Tiny Shakespeare is not at {SHAKESPEARE}"
    return None


def prepare() -> Path:
    """A fresh copy of nanoGPT with its Tiny Shakespeare data prepared; returns its folder."""
    if HOME.exists():
        shutil.rmtree(HOME)
    shutil.copytree(ANCHOR, HOME, ignore=shutil.ignore_patterns("__pycache__"))
    for path in HOME.rglob("*"):  # the anchor is read-only; the copy must be writable
        path.chmod(0o755 if path.is_dir() else 0o644)
    data = HOME / "data" / "shakespeare_char"
    shutil.copyfile(SHAKESPEARE, data / "input.txt")
    run = run_child([sys.executable, "prepare.py"], cwd=data, label="nanoGPT prepare")
    if run.returncode != 0:
        raise RuntimeError(f"nanoGPT's prepare.py exited with status {run.returncode}")
    return HOME


def train_command(out_dir: str, max_iters: int | None = None, eval_interval: int | None = None) -> list[str]:
    """nanoGPT's CPU recipe; a shorter run (for a smoke test) decays over its own length."""
    command = [sys.executable, "train.py", *RECIPE, f"--out_dir={out_dir}"]
    if max_iters:
        command += [f"--max_iters={max_iters}", f"--lr_decay_iters={max_iters}"]
    if eval_interval:
        command.append(f"--eval_interval={eval_interval}")
    return command


def sample_command(out_dir: str, max_new_tokens: int) -> list[str]:
    return [
        sys.executable,
        "sample.py",
        f"--out_dir={out_dir}",
        "--device=cpu",
        "--compile=False",
        "--num_samples=1",
        f"--max_new_tokens={max_new_tokens}",
    ]


def parse_training(lines: list[tuple[float, str]]) -> dict:
    """Evaluations (step, losses, seconds since the process started) and step times from its output."""
    evals, step_ms = [], []
    for seconds, line in lines:
        if match := EVAL_LINE.match(line):
            evals.append(
                {"step": int(match[1]), "train_loss": float(match[2]), "val_loss": float(match[3]), "wall_s": seconds}
            )
        elif match := ITER_LINE.match(line):
            if int(match[1]) > 0:  # its first iteration includes the evaluation before it
                step_ms.append(float(match[3]))
    return {"evals": evals, "step_ms": step_ms}


def load_model_module(home: Path) -> ModuleType:
    """nanoGPT's model.py, under a name of its own (this project has a `model` package too)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", home / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module
