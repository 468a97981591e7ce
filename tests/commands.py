"""Runs train.py and sample.py the way a user does, for tests: in this process
(fast) or as a subprocess (the real exit status and streams)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
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


def run(
    program: str, args: list[str], subprocess_: bool = False, timeout: float = 120, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python {program}.py ARGS`; as a subprocess with `env` added to its
    environment, if given."""
    if subprocess_ or env is not None:
        proc = subprocess.run(
            [sys.executable, f"{program}.py", *args],
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
