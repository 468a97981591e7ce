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
    code. `--debug` anywhere in argv keeps the full traceback instead."""
    import sys

    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        return main(argv) or 0
    except UserError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
