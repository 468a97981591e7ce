"""Ctrl-C while a command starts is one line, as it is once the command runs (`errors.run_cli`).

Importing torch takes seconds, and a Ctrl-C then would otherwise print Python's traceback of the
import machinery. train.py and sample.py import this module before anything heavy: importing it
makes an interrupt that nothing caught print `error: interrupted while starting; nothing was
written` and exit with status 130, as for any Ctrl-C. It imports only `os` and `sys` (loaded with
Python itself), so it takes no time.
With `--debug`, and for every other exception, Python's own report is kept.
"""

import os
import sys

INTERRUPTED = "error: interrupted while starting; nothing was written"


COMMANDS = ("train.py", "sample.py")


def _report(kind, value, traceback) -> None:
    main = os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    # Only for the commands themselves: a program that imports one of them keeps Python's report.
    if issubclass(kind, KeyboardInterrupt) and main in COMMANDS and "--debug" not in sys.argv:
        print(INTERRUPTED, file=sys.stderr, flush=True)
        os._exit(130)  # as `errors.run_cli` exits on a Ctrl-C; nothing has been written that needs flushing
    else:
        _python_report(kind, value, traceback)


_python_report = sys.excepthook
sys.excepthook = _report
