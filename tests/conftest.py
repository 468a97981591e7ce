"""Test setup: offline tiktoken, fixed seeds, the repository on sys.path; two checks on every test, that it
leaves no process running and stays within a laptop's memory; and what many tests share: `tiny_model`, a small
GPT built in one line, and `trained`, tiny checkpoints trained once per test session."""

import contextlib
import os
import resource
import shutil
import signal
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


# --- every test: no process left behind, and a laptop's memory ----------------------------------------------

# Every process the suite starts inherits this mark, and keeps it when its parent has gone (a launcher killed
# before its workers, a shell before its command), so what a test leaves running is found however deep it is.
MARK = "GPTWATCH_TEST_SESSION"
os.environ[MARK] = str(os.getpid())


def _marked_processes() -> dict[int, str]:
    """{pid: command line} of the running processes that carry this session's mark (Linux's /proc; {} elsewhere)."""
    mark = f"{MARK}={os.environ[MARK]}".encode()
    found = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()  # empty once it has exited (a zombie)
            command = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if mark in environ.split(b"\0"):
            found[int(name)] = command.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def _children_so_far() -> int:
    """Grows whenever a child process of this one has been waited for (its page faults are added up here)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt


def _maybe_children() -> bool:
    """Whether this process may have a child now (alive, or ended and not yet waited for): Linux lists each
    thread's children; where it does not, maybe."""
    lists = list(Path("/proc/self/task").glob("*/children"))
    for path in lists:
        with contextlib.suppress(OSError):  # a thread that has ended meanwhile
            if path.read_text().strip():
                return True
    return not lists


@pytest.fixture(autouse=True)
def _no_process_left_behind(request):
    """A test that starts a process ends it, pass or fail. One still running when the test is over is killed here
    and fails the test, named with its command line."""
    reaped = _children_so_far()
    before = set(_marked_processes()) if _maybe_children() else set()  # one a wider fixture keeps for its tests
    yield
    if _children_so_far() == reaped and not _maybe_children():  # started none: most tests, checked at no cost
        return
    left = {pid: command for pid, command in _marked_processes().items() if pid not in before}
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # one of ours: leave no zombie
        except (ProcessLookupError, ChildProcessError):
            pass
    if left:
        running = "; ".join(f"pid {pid}: {command[:300]}" for pid, command in left.items())
        pytest.fail(f"{request.node.nodeid} left {len(left)} process(es) running, killed now: {running}")


LAPTOP_MEMORY = 4 * 2**30  # the most resident memory a test may take, so the suite runs on a 16 GB laptop


def _peak_memory() -> int | None:
    """This process's peak resident memory since the last `_reset_peak_memory` (Linux's VmHWM), in bytes."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), None)


def _reset_peak_memory() -> bool:
    """Sets the peak back to the memory resident now (Linux 4.0 on); False where that cannot be done."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _children_peak() -> int:
    """The largest peak resident memory of any process this one started and waited for, in bytes."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


_heaviest: list[tuple[int, str]] = []  # the largest peak of a test's own process so far, and that test


@pytest.fixture(autouse=True)
def _within_a_laptops_memory(request):
    """A test that peaks above LAPTOP_MEMORY resident fails, saying by how much: the test's own process (where its
    peak can be read per test: Linux), or a process the test started (its peak, when it is the largest so far)."""
    measured, children = _reset_peak_memory(), _children_peak()
    yield
    started, peak = _children_peak(), _peak_memory() if measured else None
    if peak is not None:
        _heaviest[:] = [max([*_heaviest, (peak, request.node.nodeid)])]
    peaks = {"its process": peak, "a process it started": started > children and started}
    over = {who: peak for who, peak in peaks.items() if peak and peak > LAPTOP_MEMORY}
    if over:
        said = ", ".join(f"{who} {peak / 2**30:.1f} GiB" for who, peak in over.items())
        pytest.fail(
            f"{request.node.nodeid} peaked above the {LAPTOP_MEMORY / 2**30:.0f} GiB resident a test may take on a "
            f"laptop ({said}): use smaller shapes where the check does not depend on size, batch, or free"
        )


def pytest_terminal_summary(terminalreporter) -> None:
    """At the end: the most memory a test took, so that a change that makes one heavier is seen."""
    if _heaviest:
        peak, test = _heaviest[0]
        terminalreporter.write_line(
            f"peak memory: {peak / 2**30:.1f} GiB resident ({test}); the largest process a test started "
            f"{_children_peak() / 2**30:.1f} GiB; each at most {LAPTOP_MEMORY / 2**30:.0f} GiB"
        )


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
