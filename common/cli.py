"""What the two commands share: their options (each an `option`, a field of the dataclass of the command's settings,
which `add_options` turns into an argparse option and `check_options` checks), how text we did not write is shown,
how long work says how far it has got (`progress`), and how a command ends: `run_cli` turns a `UserError`
(common/errors.py) into one line on stderr and an exit status (1, or 2 for usage, as shells expect), and each
warning into one `warning: ...` line; everything else is a bug and keeps its traceback.

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
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import MISSING, Field, field
from typing import Any, NoReturn, TypeVar

from common.errors import GptwatchWarning, UsageError, UserError

T = TypeVar("T")


class ArgumentParser(argparse.ArgumentParser):
    """argparse for `python PROG`: an error is one `UsageError` pointing at --help instead of argparse's usage
    dump, and options are never abbreviated (`--n_lay=2` is a mistake, not `--n_layer=2`)."""

    def __init__(self, prog: str, **kwargs) -> None:
        super().__init__(
            prog=prog, allow_abbrev=False, epilog="Add --debug to see the full traceback of an error.", **kwargs
        )

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see python {self.prog} --help")


def option(default: Any, help: str = "", choices: tuple[str, ...] | None = None, **more: Any) -> Any:
    """An option of a command, as a field of the dataclass of its settings: its default, its meaning (`help`, which
    --help shows), the values it may take (`choices`) and whatever `more` the command reads of it."""
    metadata = {"help": help, "choices": choices, **more}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def default_of(option: Field) -> Any:
    return option.default_factory() if option.default is MISSING else option.default


def add_options(
    parser: argparse.ArgumentParser,
    options: Iterable[Field],
    groups: dict[str, str],
    arguments: Callable[[Field], dict],
) -> argparse.ArgumentParser:
    """`parser` with an option `--NAME` for each of `options` (`option` fields), explained by its meaning and read as
    `arguments(field)` says, and listed by --help under the title `groups` gives its first field and the fields after
    it (before any: the parser's own options). Both commands build their options here."""
    group = parser
    for each in options:
        if each.name in groups:
            group = parser.add_argument_group(groups[each.name])
        group.add_argument(f"--{each.name}", **{"help": each.metadata["help"], **arguments(each)})
    return parser


def check_options(options: Iterable[Field], settings: object, named: str) -> None:
    """A `UsageError` for the first of `options` whose value in `settings` breaks its rule, its `check`: (whether a
    value is good, the refusal of one that is not, of the option's name, as `named` words it, and its value)."""
    for each in options:
        good, refusal = each.metadata.get("check") or (None, "")
        value = getattr(settings, each.name)
        if good is not None and not good(value):
            raise UsageError(refusal.format(named.format(each.name), value))


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


def run_cli(
    main: Callable[[list[str]], int | None],
    argv: list[str],
    *,
    survive_closed_output: bool = False,
    interrupted: str = "interrupted",
) -> int:
    """Runs `main(argv)`; a `UserError` becomes one line on stderr and its exit status, a Ctrl-C that reaches it the
    line `error: {interrupted}` (what the command can say of its files then) and exit status 130, and each warning
    one `warning: ...` line. SIGTERM and SIGHUP (`stop_signals`) unwind like Ctrl-C, as `SystemExit(128 + signal)`:
    every `finally` runs, so nothing half-written is left (training takes them over while it runs, to save first;
    only the main thread can handle signals). `--debug` anywhere in argv keeps the full traceback instead. With
    `survive_closed_output`, stdout and stderr never raise."""
    if survive_closed_output:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = SurvivingStream(sys.stdout), SurvivingStream(sys.stderr)
        try:
            return run_cli(main, argv, interrupted=interrupted)
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
    if unwinding and signal.getsignal(signal.SIGINT) is _stop_while_starting:  # the command starts: Ctrl-C unwinds
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
            print(f"error: {interrupted}", file=sys.stderr)
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


def duration(seconds: float) -> str:
    """12.3 -> "12 s", 200 -> "3 min 20 s"."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"


# --- long work is never silent -------------------------------------------------------------------------------


PROGRESS_AFTER = 2.0  # seconds of work after which it says how far it has got
PROGRESS_EVERY = 60.0  # seconds between its plain lines


def progress(items: Sequence[T], what: str, *, clock: Callable[[], float] = time.monotonic) -> Iterator[T]:
    """Yields `items`, saying on stderr how far the work has got once it has run `PROGRESS_AFTER` seconds (quick work
    says nothing): a bar on a terminal (tqdm), else a line then and every `PROGRESS_EVERY` seconds, with the time
    left at the pace so far. A clock of its own keeps the word coming while one item takes long."""
    shown = _Progress(what, len(items), clock)
    ticking = threading.Thread(target=shown.tick_until_done, daemon=True)
    ticking.start()
    try:
        for item in items:
            yield item
            shown.show(done=1)
    finally:
        shown.finished.set()
        ticking.join()
        if shown.bar is not None:
            shown.bar.close()


@contextmanager
def working(what: str) -> Iterator[None]:
    """`progress` for work that is one long step (a pass whose parts are not counted): the time it has taken."""
    for _ in progress([None], what):
        yield


class _Progress:
    def __init__(self, what: str, total: int, clock: Callable[[], float]) -> None:
        self.what, self.total, self.clock, self.bar = what, total, clock, None
        self.done, self.start, self.due = 0, clock(), PROGRESS_AFTER  # due: how far into the work the next word is
        self.finished, self.lock = threading.Event(), threading.Lock()

    def tick_until_done(self) -> None:
        while not self.finished.wait(0.5):
            self.show()

    def show(self, done: int = 0) -> None:
        with self.lock:
            self.done += done
            seconds = self.clock() - self.start
            if seconds < self.due or self.done == self.total:  # not yet, or nothing left to wait for
                return
            if sys.stderr.isatty():
                if self.bar is None:
                    from tqdm import tqdm

                    self.bar = tqdm(total=self.total, desc=for_terminal(self.what), file=sys.stderr, leave=False)
                self.bar.n = self.done
                self.bar.refresh()
                return
            said = f"{duration(seconds)} so far"
            if self.total > 1:
                left = f", about {duration(seconds / self.done * (self.total - self.done))} left" if self.done else ""
                said = f"{self.done} of {self.total} done in {duration(seconds)}{left}"
            say(f"{self.what}: {said}", file=sys.stderr)
            self.due = seconds + PROGRESS_EVERY


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
    """Until `run_cli` starts the command, a Ctrl-C prints `INTERRUPTED` and exits at once with status 130, as
    `run_cli` does for any Ctrl-C; train.py and sample.py call it before importing anything heavy. The signal
    raises nothing while they import: an interrupt raised inside a library's import can be caught there and turn into
    another error later (numpy imported a second time: "cannot load module more than once per process"), or into
    none. With `--debug`, Python's own KeyboardInterrupt and traceback are kept; an ignored Ctrl-C (a job started in
    the background) stays ignored."""
    if "--debug" not in sys.argv and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop_while_starting)


def _stop_while_starting(signum: int, frame: object) -> None:
    print(INTERRUPTED, file=sys.stderr, flush=True)
    os._exit(130)  # nothing has been written that needs flushing
