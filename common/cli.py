"""What the two commands share: how text we did not write is shown, and how a command ends: `run_cli` turns a
`UserError` (common/errors.py) into one line on stderr and an exit status (1, or 2 for usage, as shells expect), and
each warning into one `warning: ...` line; everything else is a bug and keeps its traceback.

This module imports nothing but the standard library, so the commands import it before torch: a Ctrl-C while
torch loads is then one line too (`report_interrupts_while_starting`).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from contextlib import contextmanager, suppress
from typing import NoReturn

from common.errors import GptwatchWarning, UsageError, UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse for `python PROG`: an error is one `UsageError` pointing at --help instead of argparse's usage
    dump, and options are never abbreviated (`--n_lay=2` is a mistake, not `--n_layer=2`)."""

    def __init__(self, prog: str, **kwargs) -> None:
        super().__init__(
            prog=prog, allow_abbrev=False, epilog="Add --debug to see the full traceback of an error.", **kwargs
        )

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see python {self.prog} --help")


def _one_line(text: object) -> str:
    # One line, whatever the message quotes (a path or a library's error may hold newlines), that shows
    # what it quotes rather than letting it act on the terminal.
    return for_terminal(" ".join(str(text).splitlines()))


def stop_signals() -> tuple[int, ...]:
    """The signals that stop a command: Ctrl-C, SIGTERM (kill, a scheduler), and SIGHUP (a closed terminal, an ssh
    drop), unless SIGHUP is ignored already, as under `nohup`, which asks the command to go on."""
    hangup = getattr(signal, "SIGHUP", None)
    ignored = hangup is None or signal.getsignal(hangup) is signal.SIG_IGN
    return (signal.SIGINT, signal.SIGTERM) + (() if ignored else (hangup,))


@contextmanager
def handling(handler: Callable, signals: Iterable[int]):
    """`handler` handles `signals` while it is held; whatever handled them before does again after."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class SurvivingStream:
    """A text stream (stdout, stderr) whose writes never raise. The first write or flush that fails (a
    pipe whose reader has gone, EPIPE; a terminal that hung up, EIO) points the stream's file descriptor
    at /dev/null, so what is still buffered, and everything written later, goes nowhere quietly, also
    when Python flushes the stream at exit."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.lost = False

    def write(self, text: str) -> int:
        return self._unless_lost(lambda: self.stream.write(text), len(text))

    def flush(self) -> None:
        self._unless_lost(self.stream.flush, None)

    def _unless_lost(self, do: Callable, otherwise: object):
        if self.lost:
            return otherwise
        try:
            return do()
        except OSError:
            self.lost = True
        # Not a real file (a test's StringIO), or no /dev/null to open: the flag alone drops its output.
        with suppress(OSError, ValueError, io.UnsupportedOperation):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)
        return otherwise

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def run_cli(main: Callable[[list[str]], int | None], argv: list[str], *, survive_closed_output: bool = False) -> int:
    """Runs `main(argv)`; a `UserError` becomes one line on stderr and its exit status, a Ctrl-C that reaches it
    exit status 130, and each warning one `warning: ...` line. SIGTERM and SIGHUP (`stop_signals`) unwind like
    Ctrl-C, as `SystemExit(128 + signal)`: every `finally` runs, so nothing half-written is left (training takes
    them over while it runs, to save first; only the main thread can handle signals). `--debug` anywhere in argv
    keeps the full traceback instead. With `survive_closed_output`, stdout and stderr never raise."""
    if survive_closed_output:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = SurvivingStream(sys.stdout), SurvivingStream(sys.stderr)
        try:
            return run_cli(main, argv)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = saved
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]

    def unwind(signum, frame) -> None:
        raise SystemExit(128 + signum)

    unwinding = (
        [sig for sig in stop_signals() if sig != signal.SIGINT]
        if threading.current_thread() is threading.main_thread()
        else []
    )
    with warnings.catch_warnings():
        plain = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if not issubclass(category, GptwatchWarning) or debug:
                return plain(message, category, filename, lineno, file, line)
            # Above a progress bar when one is on the terminal (tqdm clears its bar, writes the line and draws
            # the bar again below it), never inside the bar's line; without tqdm loaded no bar can be there.
            tqdm = sys.modules.get("tqdm")
            (tqdm.tqdm.write if tqdm is not None else print)("warning: " + _one_line(message), file=sys.stderr)

        warnings.showwarning = show
        try:
            with handling(unwind, unwinding):
                return main(argv) or 0
        except UserError as exc:
            if debug:
                raise
            print("error: " + _one_line(exc), file=sys.stderr)
            return exc.status
        except KeyboardInterrupt:
            if debug:
                raise
            print("error: interrupted; the last checkpoint saved, if any, is intact", file=sys.stderr)
            return 130


# --- text we did not write -------------------------------------------------------------------------------


def for_terminal(text: str) -> str:
    """`text` with every character that is not printable (see `str.isprintable`; a space is) escaped as Python
    writes it in a string literal (\\n, \\x1b, \\u202e).

    Text we did not write (a prompt, a corpus's tokens, a sample, a file name) is only ever shown, never obeyed: ESC
    starts the sequences that clear a screen or retitle a window, the other C0 and C1 controls and DEL act on the
    terminal, and invisible format characters such as the right-to-left override make a line read as something it
    is not. Printable text, any script, is left as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(*lines: object, file=None) -> None:
    """Prints each of `lines` as one line, through `for_terminal`: every status line a command prints (the settings
    chosen, the model read, `TensorBoard:`, `done:`, what was written, the sample command) goes through here, as
    errors and warnings do through `run_cli`, since each may quote a name or a text we did not write."""
    for line in lines:
        print(for_terminal(str(line)), file=file if file is not None else sys.stdout)


def markdown_literal(text: str) -> str:
    """`text` as a Markdown code block indented by four spaces, every line of it. Unlike a fenced block,
    which a line of ``` in the text would close, an indented block ends only at a line that is not
    indented, and this one has none; a fence or an HTML tag inside it is neither (an indented line is
    never one), and Markdown shows the block's characters as they are."""
    # The line breaks Python-Markdown (TensorBoard's) knows: it turns "\r\n" and "\r" into "\n" first.
    return "\n".join("    " + line for line in re.split(r"\r\n|\r|\n", text))


# --- Ctrl-C while a command starts -------------------------------------------------------------------------

INTERRUPTED = "error: interrupted while starting; nothing was written"


def report_interrupts_while_starting() -> None:
    """Makes an interrupt that nothing caught (a Ctrl-C while torch loads, before `run_cli` runs) print
    `INTERRUPTED` and exit with status 130, as `run_cli` does for any Ctrl-C; train.py and sample.py call it
    before importing anything heavy. With `--debug`, and for every other exception, Python's own report is kept."""
    python_report = sys.excepthook

    def report(kind, value, traceback) -> None:
        main = os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "")
        # Only for the commands themselves: a program that imports one of them keeps Python's report.
        if issubclass(kind, KeyboardInterrupt) and main in ("train.py", "sample.py") and "--debug" not in sys.argv:
            print(INTERRUPTED, file=sys.stderr, flush=True)
            os._exit(130)  # as `run_cli` exits on a Ctrl-C; nothing has been written that needs flushing
        else:
            python_report(kind, value, traceback)

    sys.excepthook = report
