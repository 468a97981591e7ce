"""The project's errors and its one way to warn. Library code raises a `UserError` (or its `UsageError`) for a bad
input, with a message that names the problem and the fix, or a plain `ValueError` for a programming mistake; only
the commands (`cli.run_cli`) turn a `UserError` into one line and an exit status. Warnings go through `warn`.

Standard library only: the commands import it before torch.
"""

from __future__ import annotations

import sys
import warnings


class UserError(Exception):
    """A bad input, with a message that names the problem and the fix."""

    status = 1  # the command's exit status


class UsageError(UserError):
    """A bad command line or config."""

    status = 2  # as shells expect of a usage error


class GptwatchWarning(UserWarning):
    """Something the user should know that does not stop the run."""


def warn(message: str) -> None:
    """The one way library code warns: a `GptwatchWarning` pointing at the caller."""
    warnings.warn(message, GptwatchWarning, stacklevel=2)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that failed (on the CPU or a GPU), which the places that allocate a
    model turn into one line naming what to lower, rather than a bug's traceback."""
    torch = sys.modules.get("torch")  # a failed allocation of torch's means torch is loaded
    if isinstance(exc, MemoryError) or isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    words = ("not enough memory", "out of memory", "can't allocate memory")
    return isinstance(exc, RuntimeError) and any(said in str(exc) for said in words)
