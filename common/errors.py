"""The project's errors and its one way to warn. Library code raises a `UserError` (or its `UsageError`) for a bad
input, with a message that names the problem and the fix, or a plain `ValueError` for a programming mistake; only
the commands (`cli.run_cli`) turn a `UserError` into one line and an exit status. Warnings go through `warn`.

Standard library only: the commands import it before torch.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager


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


@contextmanager
def out_of_memory(refusal: Callable[[BaseException], UserError]) -> Iterator[None]:
    """An allocation that fails inside (on the CPU or a GPU) becomes `refusal(its exception)`: where a model is
    allocated, one line naming what to lower, rather than a bug's traceback."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        torch = sys.modules.get("torch")  # a failed allocation of torch's means torch is loaded
        words = ("not enough memory", "out of memory", "can't allocate memory")
        if isinstance(exc, (MemoryError, getattr(torch, "OutOfMemoryError", ()))) or any(w in str(exc) for w in words):
            raise refusal(exc) from None
        raise
