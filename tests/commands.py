"""Runs train.py and sample.py the way a user does, for tests: in this process
(fast) or as a subprocess (the real exit status and streams)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Small enough that a run takes well under a second on one CPU core.
TINY = [
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=16",
    "--block_size=32",
    "--batch_size=4",
    "--max_iters=6",
    "--warmup_iters=1",
    "--eval_interval=3",
    "--eval_iters=2",
    "--sample_tokens=0",
    "--device=cpu",
    "--run_name=t",
]
TEXT = "".join(
    f"the dog saw the ball and it rolled away {i % 7}.\nthe cat saw the king and he waved.\n" for i in range(40)
)


# How long a test waits for a process, or for one to reach the state it needs, before calling it hung: minutes, as
# a machine under load can be tens of times slower than an idle one. Nothing waits for a fixed time instead.
PATIENCE = 600


def tiny_args(tmp_path: Path, *extra: str) -> list[str]:
    """A config file of our own (so a default config does not leak in), a corpus, and every folder in tmp_path."""
    config = tmp_path / "tiny.toml"
    if not config.exists():
        config.write_text("# tiny test run; settings are on the command line\n")
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(TEXT)
    return [
        str(config),
        f"--dataset={corpus}",
        f"--data_dir={tmp_path / 'prep'}",
        f"--out_dir={tmp_path / 'out'}",
        f"--log_dir={tmp_path / 'runs'}",
        *TINY,
        *extra,
    ]


# Python, made to restore the signals that stop a command to their defaults and then to become the command.
_AS_FROM_A_TERMINAL = (
    "import os, signal, sys\n"
    "for name in ('SIGINT', 'SIGTERM', 'SIGHUP'):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


def python(*args: str) -> list[str]:
    """The command line of `python ARGS` started as a terminal starts it: Ctrl-C, SIGTERM and a hang-up stop it,
    whatever the test runner ignores. A runner may ignore some (`nohup` SIGHUP, a shell's background job SIGINT), and
    a process inherits what its parent ignores, across exec too; so a test that sends one, or that needs the command
    to behave as a user's would, starts it through this."""
    if os.name == "nt":  # no SIGHUP, and exec starts a new process there: as it is
        return [sys.executable, *args]
    return [sys.executable, "-S", "-c", _AS_FROM_A_TERMINAL, *args]


@contextlib.contextmanager
def started(command: list[str], **popen) -> Iterator[subprocess.Popen]:
    """`subprocess.Popen(command, **popen)` in a session of its own, stopped with everything it started (a shell's
    command) on the way out, whatever the test's outcome: asked first (SIGTERM: a launcher then stops its workers,
    which torchrun starts in sessions of their own), then made to."""
    proc = subprocess.Popen(command, cwd=popen.pop("cwd", ROOT), start_new_session=True, **popen)
    try:
        yield proc
    finally:
        for stop in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):  # none of it left
                os.killpg(proc.pid, stop)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def run(
    program: str,
    args: list[str],
    subprocess_: bool = False,
    timeout: float = PATIENCE,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python {program}.py ARGS`; as a subprocess (`python`) with `env` added to
    its environment, if given."""
    if subprocess_ or env is not None:
        proc = subprocess.run(
            python(f"{program}.py", *args),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        return proc.returncode, proc.stdout, proc.stderr
    import sample
    import train
    from common.cli import run_cli

    main = {"train": train.main, "sample": sample.main}[program]
    said = {"interrupted": train.INTERRUPTED} if program == "train" else {}  # as each command's __main__ calls it
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(main, list(args), **said)
    return code, out.getvalue(), err.getvalue()


def run_train(args: list[str], subprocess_: bool = False) -> tuple[int, str, str]:
    return run("train", args, subprocess_)


def run_sample(args: list[str], subprocess_: bool = False) -> tuple[int, str, str]:
    return run("sample", args, subprocess_)


def one_line(err: str) -> str:
    """stderr of a failed run: exactly one line, 'error: ...', no traceback."""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    return err
