"""Ctrl-C while a command starts is one line, as it is once the command runs (`errors.run_cli`).

Importing torch takes seconds, and a Ctrl-C then would otherwise print Python's traceback of the
import machinery. train.py and sample.py import this module before anything heavy: importing it
makes an interrupt that nothing caught print `error: interrupted while starting; nothing was
written` (exit status 130, as for any Ctrl-C). It imports nothing but `sys`, so it loads at once.
With `--debug`, and for every other exception, Python's own report is kept.
"""

import sys

INTERRUPTED = "error: interrupted while starting; nothing was written"


def _report(kind, value, traceback) -> None:
    if issubclass(kind, KeyboardInterrupt) and "--debug" not in sys.argv:
        # Python then ends the process by SIGINT, so the shell sees 130 as for any Ctrl-C.
        print(INTERRUPTED, file=sys.stderr)
        return
    _python_report(kind, value, traceback)


_python_report = sys.excepthook
sys.excepthook = _report
