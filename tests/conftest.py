"""Test setup: offline tiktoken, fixed seeds, the repository on sys.path; and what many tests
share: `tiny_model`, a small GPT built in one line, and `trained`, tiny checkpoints trained once
per test session."""

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

# GPT-2's BPE ranks ship in ../shared/tiktoken so tests run offline; a user's
# own setting wins.
if "TIKTOKEN_CACHE_DIR" not in os.environ and (SHARED / "tiktoken").is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(SHARED / "tiktoken")

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """Long work says how far it has got once it has run `cli.PROGRESS_AFTER` seconds, so whether a command run here
    prints such a line would depend on how busy the machine is; the tests compare stderr exactly, so they see none
    unless they ask for them (tests/test_outputs.py)."""
    monkeypatch.setattr("common.cli.PROGRESS_AFTER", float("inf"))


def shared_file(relative: str) -> Path:
    """A file from ../shared, or skip the test saying what is missing."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} not present (the shared corpora sit beside the repository)")
    return path


def require_gpt2() -> None:
    """Skip, saying why, when GPT-2's BPE ranks cannot be loaded here."""
    from common.errors import UserError
    from data.tokenizer import gpt2_encoding

    try:
        gpt2_encoding()
    except UserError:
        pytest.skip("GPT-2 BPE ranks unavailable (offline, no tiktoken cache); set TIKTOKEN_CACHE_DIR or connect once")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that needs GPT-2's BPE ranks is skipped, not failed, on a machine
    that has neither the internet nor a tiktoken cache (TIKTOKEN_CACHE_DIR)."""
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if excinfo is not None and "cannot load the GPT-2 BPE" in str(excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (
            str(item.path),
            item.location[1] or 0,
            "Skipped: GPT-2 BPE ranks unavailable (offline, no tiktoken cache); set TIKTOKEN_CACHE_DIR or connect once",
        )


def custom_scalar_charts(events, folder=None) -> tuple[list[str], dict[str, list[str]]]:
    """From a loaded `EventAccumulator`: the Custom Scalars categories as TensorBoard reads them back, and
    each chart's title with the scalar tags it draws (its regexes match the start of a tag). With the run's
    `folder`, the runs inside it (each head's) count too, their tags named RUN/TAG, the line's legend name."""
    import re
    from pathlib import Path

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    (stored,) = events.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(stored.tensor_proto.string_val[0])
    tags = [("", tag) for tag in events.Tags()["scalars"]]
    for run in sorted(p for p in Path(folder).iterdir() if p.is_dir()) if folder else []:
        tags += [(f"{run.name}/", tag) for tag in EventAccumulator(str(run)).Reload().Tags()["scalars"]]
    charts = {
        chart.title: sorted(run + tag for run, tag in tags if any(re.match(rx, tag) for rx in chart.multiline.tag))
        for category in layout.category
        for chart in category.chart
    }
    return [category.title for category in layout.category], charts


def tiny_model(arch: str = "gpt2", *, seed: int | None = 0, **sizes) -> "GPT":  # noqa: F821
    """A small GPT in eval mode: 2 layers of 2 heads, 16 wide, a vocabulary of 50, block 16, unless
    `sizes` say otherwise (any `GPTConfig` field). Seeded with `seed` first (None: not seeded)."""
    from model import GPT, GPTConfig

    if seed is not None:
        torch.manual_seed(seed)
    config = {"vocab_size": 50, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16, "arch": arch, **sizes}
    return GPT(GPTConfig(**config)).eval()


@dataclass(frozen=True)
class Trained:
    """Checkpoints trained once per session from `tests.commands.tiny_args` (1 layer of 2 heads, 2 steps):
    `char` (the character tokenizer) and `gpt2` (GPT-2 BPE), each `ckpt.pt` in its own folder. Shared
    by every test that needs one: copy it (`copy_to`) before changing anything."""

    folder: Path

    @property
    def char(self) -> Path:
        return self.folder / "out" / "ckpt.pt"

    @property
    def gpt2(self) -> Path:
        return self.folder / "gpt2" / "ckpt.pt"

    def copy_to(self, folder: Path, which: str = "char") -> Path:
        """A copy of one checkpoint as folder/ckpt.pt; returns its path."""
        folder.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(getattr(self, which), folder / "ckpt.pt"))


def train_tiny_checkpoints(folder: Path) -> Trained:
    from tests.commands import run, tiny_args

    folder.mkdir(parents=True, exist_ok=True)
    for name, extra in (("out", []), ("gpt2", ["--tokenizer=gpt2"])):
        code, _, err = run(
            "train", tiny_args(folder, f"--out_dir={folder / name}", f"--run_name=t-{name}", "--max_iters=2", *extra)
        )
        assert code == 0, err
    return Trained(folder)


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Trained:
    return train_tiny_checkpoints(tmp_path_factory.mktemp("trained"))
