"""Test setup: offline tiktoken, fixed seeds, the repository on sys.path."""

import os
import sys
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


def shared_file(relative: str) -> Path:
    """A file from ../shared, or skip the test saying what is missing."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} not present (the shared corpora sit beside the repository)")
    return path


def require_gpt2() -> None:
    """Skip, saying why, when GPT-2's BPE ranks cannot be loaded here."""
    from data.tokenizer import gpt2_encoding
    from errors import UserError

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
        report.longrepr = (str(item.path), item.location[1] or 0,
                           "Skipped: GPT-2 BPE ranks unavailable (offline, no tiktoken cache); "
                           "set TIKTOKEN_CACHE_DIR or connect once")
