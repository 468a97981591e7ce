"""The files and folders a user points the commands at: one helper per rule, each raising one
`UserError` (or the `UsageError` a caller asks for) that names the path, the problem and the fix.

- `regular_file`: the path is a regular file (not missing, not a folder, not a pipe or device,
  which would block a reader or never end).
- `read_bytes` / `read_text` (`utf8`): a regular file, read (UTF-8, a byte-order mark dropped).
- `clear_for_file`: nothing but a regular file stands where a file is about to be written.
- `writable_folder`: a folder exists, or can be made, and files can be created in it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from errors import UserError


def what_stands_at(path: Path, *, follow_links: bool = True) -> str | None:
    """What is wrong with `path` as a regular file, in words ("missing", "a directory", ...); None
    when it is one. Without `follow_links`, a symbolic link is itself the problem."""
    try:
        mode = path.stat().st_mode if follow_links else path.lstat().st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing (a part of its path is a file)"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file (a pipe, socket or device)"


def regular_file(path: str | Path, what: str, fix: str, error: type[UserError] = UserError) -> Path:
    """`path` as a Path when it is a regular file; otherwise `error`: "{what} {path} is a directory; {fix}"."""
    path = Path(path)
    problem = what_stands_at(path)
    if problem == "missing":
        raise error(f"{what} {path} not found; {fix}")
    if problem is not None:
        raise error(f"{what} {path} is {problem}; {fix}")
    return path


def cannot(action: str, path: Path, exc: OSError) -> str:
    """"cannot read config file x.toml (Permission denied)": an OSError in words, with the path."""
    return f"cannot {action} {path} ({exc.strerror or exc})"


def read_bytes(path: str | Path, what: str, fix: str, error: type[UserError] = UserError) -> bytes:
    """The bytes of a regular file (see `regular_file`), or `error` saying why they cannot be read."""
    path = regular_file(path, what, fix, error)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise error(f"{cannot('read ' + what, path, exc)}; check its permissions") from None
    except MemoryError:
        raise error(f"{what} {path} ({path.stat().st_size:,} bytes) does not fit in memory; use a smaller "
                    f"file") from None


def read_text(path: str | Path, what: str, fix: str, error: type[UserError] = UserError) -> str:
    """A regular file's text: UTF-8, without the byte-order mark some editors write first."""
    return utf8(read_bytes(path, what, fix, error), path, what, error)


def utf8(data: bytes, path: str | Path, what: str, error: type[UserError] = UserError) -> str:
    """The bytes read from `path` as UTF-8 text, without a byte-order mark."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 (bad byte at offset {exc.start}); save it as UTF-8, e.g. "
                    f"`iconv -f latin1 -t utf-8`") from None


def clear_for_file(path: str | Path, what: str, fix: str, error: type[UserError] = UserError) -> Path:
    """`path`, after checking that nothing but a regular file (or nothing) stands there, so a file can
    be written there: a folder or a pipe in its place is `error` now, not a failure halfway."""
    path = Path(path)
    problem = what_stands_at(path)
    if problem is not None and not problem.startswith("missing"):
        raise error(f"{path} is {problem}, where {what} goes; {fix}")
    return path


def writable_folder(folder: str | Path, key: str) -> Path:
    """`folder` (made if missing), after checking that files can be created in it; a UserError naming
    `--key` otherwise."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # A new file of a fresh name (mkstemp creates it exclusively), so the test never writes
        # through a link or over a file someone else left there.
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"{cannot('write to ' + key, folder, exc)}; choose a writable --{key}") from None
    return folder
