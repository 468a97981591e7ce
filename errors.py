"""The one error type users see.

Anything raised as `UserError` is a problem with the user's input (a config,
a file, a flag). The command-line entry points print it as one line on stderr
and exit with `exit_code`; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A bad input, with a message that names the problem and the fix."""

    exit_code = 1


class UsageError(UserError):
    """A bad command line or config: exit status 2, as shells expect."""

    exit_code = 2


def run_cli(main, argv: list[str]) -> int:
    """Runs `main(argv)`; a `UserError` becomes one line on stderr and its exit
    code, and a Ctrl-C that reaches it exit status 130. `--debug` anywhere
    in argv keeps the full traceback instead."""
    import sys

    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        return main(argv) or 0
    except UserError as exc:
        if debug:
            raise
        # One line, whatever the message quotes (a path or a library's error may hold newlines).
        print("error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted; the last checkpoint saved, if any, is intact", file=sys.stderr)
        return 130
