"""The files and folders a user points the commands at, and how every file and folder is written.

Each check raises one `UserError` (or the `UsageError` a caller asks for) naming the path, the problem and the fix:

- `regular_file`: the path is a regular file (not missing, not a folder, not a pipe or device, which would block a
  reader or never end); `read_bytes` / `read_text` read one (text as UTF-8, a byte-order mark dropped).
- `writable_folder`: a folder exists, or can be made, and files can be created in it.
- `destination`: the path a user gave for a file or folder to write, with a name of its own ('.' and 'out/' name
  folders, never a file).
- `inside_name`: a name meant to stay inside a folder (a run name) is relative, without '..'; `check_utf8`: text
  holds only characters UTF-8 can write.
- `path_setting`: every path setting of both commands, once: `~` expanded, an empty path (an unset shell
  variable) and a part longer than a file name (`name_too_long`) refused, naming the setting.
- `Kind`: whose a file is, known by the header its writer put at a fixed place (never a search through it): a
  command replaces only a file of the kind it writes (a page, a heatmap, a checkpoint and ckpt.prev.pt, an
  export, the run lock); a file of the user's, a link or a folder there is left as it is. `write_files` is the one
  way a command writes its outputs: all checked, then each written whole, and no folder left by a failure.

Every writer (`fresh_file`, `fresh_folder`, `replace_file`, `replace_folder`) stages its work in a new file or
folder of a name nobody can guess, created exclusively beside its target, then renames it into place: a link
planted under any name is replaced, never written through, and a reader never sees half a file. What a process
that has ended left half-written (named `...tmp-<pid>...`) is removed by `remove_dead_leftovers`; what a live
process is writing is kept. A failed write is reported as the OSError that happened (`os_error_of`), in words that
name the disk when it is full (`write_error`).
"""

from __future__ import annotations

import errno
import glob
import os
import re
import secrets
import shlex
import shutil
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import BinaryIO, NoReturn

from common.errors import UsageError, UserError
from common.parsing import NotParsed, parse_json


def what_stands_at(path: Path, *, follow_links: bool = True) -> str | None:
    """What is wrong with `path` as a regular file, in words ("missing", "a directory", ...); None when it is one."""
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
    """`path` when it is a regular file (a pipe or a device would block a reader or never end)."""
    path = Path(path)
    problem = what_stands_at(path)
    if problem is not None:
        words = "not found" if problem == "missing" else f"is {problem}"
        raise error(f"{what} {path} {words}; {fix}")
    return path


def cannot(action: str, path: Path, exc: OSError) -> str:
    return f"cannot {action} {path} ({exc.strerror or exc})"


def read_bytes(path: str | Path, what: str, fix: str, error: type[UserError] = UserError, *, size: int = -1) -> bytes:
    """The bytes of a user's regular file (`size` of them at most, where its start is all a reader needs)."""
    path = regular_file(path, what, fix, error)
    try:
        with path.open("rb") as fh:
            return fh.read(size)
    except OSError as exc:
        raise error(f"{cannot('read ' + what, path, exc)}; check its permissions") from None
    except MemoryError:
        raise error(
            f"{what} {path} ({path.stat().st_size:,} bytes) does not fit in memory; use a smaller file"
        ) from None


def read_text(path: str | Path, what: str, fix: str, error: type[UserError] = UserError) -> str:
    """A user's UTF-8 text file, or one `error` saying what else it is (binary, UTF-16/32, another encoding)."""
    raw = read_bytes(path, what, fix, error)
    if b"\x00" in raw:  # no UTF-8 text holds NUL bytes: text in another encoding does, or binary data
        # Text of two or four bytes a character, by its byte-order mark or, without one, by its NUL bytes (every
        # other byte, for the first few hundred characters of Latin text in UTF-16).
        marks = (
            (b"\xff\xfe\x00\x00", "UTF-32LE"),
            (b"\x00\x00\xfe\xff", "UTF-32BE"),
            (b"\xff\xfe", "UTF-16LE"),
            (b"\xfe\xff", "UTF-16BE"),
        )
        head = raw[:1024] if len(raw) % 2 == 0 else raw[:1023]
        encoding = next((name for mark, name in marks if raw.startswith(mark)), None) or next(
            (
                name
                for parity, name in ((1, "UTF-16LE"), (0, "UTF-16BE"))
                if len(head) >= 4 and head[parity::2].count(0) == len(head) // 2 and 0 not in head[1 - parity :: 2]
            ),
            None,
        )
        if encoding is not None:
            converted = Path(path).with_name(f"{Path(path).stem}-utf8.txt")
            raise error(
                f"{what} {path} looks like {encoding} text, not UTF-8; convert it, e.g. iconv -f "
                f"{encoding} -t UTF-8 {shlex.quote(str(path))} > {shlex.quote(str(converted))}"
            )
        raise error(
            f"{what} {path} holds NUL bytes (the first at byte {raw.index(0):,}), so it is binary "
            f"data, not text; give a UTF-8 text file"
        )
    try:
        return raw.decode("utf-8-sig")  # without the byte-order mark some editors write first
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {path} is not UTF-8 (bad byte at offset {exc.start}); save it as UTF-8, e.g. "
            f"`iconv -f latin1 -t utf-8`"
        ) from None


def writable_folder(folder: str | Path, key: str) -> Path:
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = fresh_file(folder / "write-test")  # never through a link, never over another's file
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"{cannot('write to ' + key, folder, exc)}; choose a writable --{key}") from None
    return folder


# --- writing a file whole: never through a link, never half -------------------------------------------


def _fresh(path: Path, make: Callable[[Path], object]):
    """`make(name)` for a new name `.{name}.tmp-{pid}-{random}` beside `path`, until one is free: the pid lets
    `remove_dead_leftovers` delete it once this process has ended; the random part keeps anyone from planting
    something under it beforehand."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(8)}")
        try:
            return make(tmp), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


def fresh_file(path: str | Path) -> tuple[int, Path]:
    return _fresh(Path(path), lambda tmp: os.open(tmp, _NEW_FILE, 0o666))


def fresh_folder(path: str | Path) -> Path:
    return _fresh(Path(path), lambda tmp: tmp.mkdir(0o777))[1]  # mkdir never follows a link


class _RecordingFile:
    """A file whose failed writes are remembered: a library that writes through it may report the OSError
    as something else (torch.save's zip writer: a RuntimeError about file positions)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str):
        return getattr(self.fh, name)


# --- whose a file is: known by the header its writer puts at a fixed place ---------------------------------

HEAD_BYTES = 64 * 1024  # how far into a file a kind's header may lie


@dataclass(frozen=True)
class Kind:
    """A kind of file the commands write, known again by a header its writer puts at a fixed place, so that writing
    one replaces only a file the tool wrote there itself: `bears(first_bytes)` reads it there (a page's first line,
    a PNG's text chunk, a checkpoint's first key), never searching, so a file that merely mentions a header is not
    one. `header`: what `write_files` writes first (nothing, where the format's own writer puts it). `what` names
    the kind."""

    what: str
    bears: Callable[[bytes], bool]
    header: bytes = b""

    @classmethod
    def starting(cls, what: str, header: bytes) -> Kind:
        return cls(what, lambda head: head.startswith(header), header)

    def check(self, path: str | Path, fix: str, where: str | None = None) -> Path:
        """`path`, when a file of this kind may be written there: nothing stands there, or a regular file with this
        kind's header. Anything else (a file of the user's, a link, a folder, a pipe) is left as it is and never
        followed: a `UserError` naming `fix` (and `where`, what goes there)."""
        path = Path(path)
        problem = what_stands_at(path, follow_links=False)
        if problem is None and not self.bears(read_head(path)):
            raise UserError(
                f"{path} exists and is not {self.what} written earlier; it is left as it is: remove it or {fix} "
                f"(gptwatch replaces only files it wrote)"
            )
        if problem is not None and not problem.startswith("missing"):
            never = ", never followed or replaced" if problem == "a symbolic link" else ""
            raise UserError(
                f"{path} is {problem}, where {where or self.what} goes; it is left as it is{never}: move it away or "
                f"{fix}"
            )
        return path


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist yet, outermost first: what making it makes."""
    return [path for path in reversed([folder, *folder.parents]) if not path.exists()]


def remove_empty(folders: list[Path]) -> None:
    """Removes `folders` that a command made (`missing_folders`) and left empty, innermost first."""
    for folder in reversed(folders):
        with suppress(OSError):
            folder.rmdir()  # only when empty


def read_record(path: Path) -> dict:
    """The JSON object a command wrote in a small file of its own (a run folder's owner, an export's marker); {} when
    none is readable there: no file, a link or a pipe (which would block its reader), or no JSON object."""
    if what_stands_at(path, follow_links=False) is not None:
        return {}
    try:
        record = parse_json(path.read_bytes())
    except (OSError, NotParsed):
        return {}
    return record if isinstance(record, dict) else {}


def read_head(path: Path) -> bytes:
    """The first `HEAD_BYTES` of a regular file (b"" when it cannot be read), where every header lies."""
    with suppress(OSError), open(path, "rb") as fh:
        return fh.read(HEAD_BYTES)
    return b""


def write_files(files: dict[Path, Callable[[BinaryIO], object]], kind: Kind, what: str, option: str) -> list[Path]:
    """The one way a command writes its outputs: every path checked first (`Kind.check`: a refusal leaves every
    path as it was), then each written whole (`replace_file`), after `kind.header`. Folders are made as needed; a
    write that fails is one `UserError` ("cannot write {what} (why); choose a writable {option}"), and the folders
    it made are removed again, so a failed command leaves no empty folder."""
    for path in files:
        kind.check(path, f"choose another {option}")
    made: list[Path] = []
    try:
        for path, write in files.items():
            made += missing_folders(path.parent)
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(path, lambda fh, write=write: (fh.write(kind.header), write(fh)))
    except OSError as exc:
        remove_empty(made)
        raise UserError(cannot_write(what, path, exc, f"choose a writable {option}")) from None
    return list(files)


def replace_file(
    path: str | Path,
    write: Callable[[BinaryIO], object],
    before_replace: Callable[[], object] | None = None,
) -> Path:
    """Writes `path` as a whole new file: `write(fh)` fills a `fresh_file`, renamed over `path` once on disk. An
    error (or an interrupt) leaves `path` as it was and no temporary file; a failed write is raised as its OSError.
    Outputs go through `write_files`, which first checks whose file stands there."""
    path = Path(path)
    remove_dead_leftovers(path)
    fd, tmp = fresh_file(path)
    try:
        with open(fd, "wb") as raw:
            fh = _RecordingFile(raw)
            try:
                write(fh)
            except Exception as exc:
                _raise_os_error_of(exc, fh.error)
            raw.flush()
            os.fsync(raw.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def replace_folder(folder: Path, write: Callable[[Path], object], last: str) -> None:
    """Writes `folder` as a whole new folder: `write(staging)` fills a `fresh_folder`, renamed to `folder` when no
    folder stands there. Into a folder that stands (one the caller has checked may be replaced) the new files are
    moved one by one, `last` (a marker saying the folder is complete) last, and its other files are removed: it
    keeps its place, permissions and mount (it may be the one the command runs in)."""
    remove_dead_leftovers(folder)
    existing = what_stands_at(folder, follow_links=False) == "a directory"
    staging = fresh_folder(folder / folder.name if existing else folder)  # on the disk `folder` is on
    try:
        try:
            write(staging)
        except Exception as exc:
            _raise_os_error_of(exc)
        if not existing:
            if not _is_folder(folder):  # a folder that appeared meanwhile was never checked: it stays
                folder.unlink(missing_ok=True)
            os.replace(staging, folder)
            return
        earlier = {p.name for p in folder.iterdir()} - {staging.name}
        _remove(folder / last)  # until it is back, the folder does not claim to be complete
        new = sorted((p.name for p in staging.iterdir()), key=lambda name: name == last)
        for name in new:
            if _is_folder(folder / name) or _is_folder(staging / name):
                _remove(folder / name)  # a file and a folder never replace each other by renaming
            os.replace(staging / name, folder / name)
        for name in earlier - set(new):
            _remove(folder / name)
        staging.rmdir()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _remove(path: Path) -> None:
    if _is_folder(path):  # a link is removed, never what it points to
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _raise_os_error_of(exc: Exception, recorded: OSError | None = None) -> NoReturn:
    error = recorded or os_error_of(exc)
    if error is None or error is exc:
        raise exc
    raise error from None


def os_error_of(exc: BaseException) -> OSError | None:
    """The OSError behind `exc`: itself, one it was raised from, or one a library described in its own words
    (safetensors: "IoError(Os { code: 28, kind: StorageFull, ... })"). A write cut short that lost its errno (numpy's
    `tofile`: "12924 requested and 0 written") is a full disk: what cuts a write to a file short."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    code = re.search(r"\bOs \{ code: ([0-9]{1,4}),", text)
    if code is not None:
        return OSError(int(code[1]), os.strerror(int(code[1])))
    if re.search(r"\b[0-9]+ requested and [0-9]+ written\b", text):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    for number in _FULL:
        if os.strerror(number) in text:
            return OSError(number, os.strerror(number))
    return exc if isinstance(exc, OSError) else None


_FULL = (errno.ENOSPC, errno.EDQUOT)


def cannot_write(what: str, path: str | Path, exc: OSError, fix: str) -> str:
    """The one-line refusal of a write of `what` at `path` that failed with `exc`: why, then `fix`, after freeing
    space when space is what is missing."""
    return f"cannot write {what} ({write_error(exc, path)}); {'free disk space or ' if exc.errno in _FULL else ''}{fix}"


def write_error(exc: OSError, path: str | Path) -> str:
    """Why a write at `path` failed: a file where a folder of it should be, by name; a full disk (or quota) named by
    its mount point, where space is missing."""
    blocker = next((p for p in Path(path).parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        return f"{blocker} is a file, not a folder"
    if exc.errno not in _FULL:
        return exc.strerror or str(exc)
    return f"{os.strerror(exc.errno)} on the disk mounted at {mount_point(path)}"


def mount_point(path: str | Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def destination(text: str, what: str, *, folder: bool, fix: str) -> Path:
    """The path `text` names, for the option `what` ("--html") to write a file (`folder=False`) or a folder.
    A path whose last part is empty (a trailing '/'), '.' or '..' names a folder, never a file (pathlib would
    drop the '/', making 'out/' the file 'out'); such a folder is resolved to its real name."""
    last = text.replace(os.altsep or os.sep, os.sep).rsplit(os.sep, 1)[-1]
    if last not in ("", ".", ".."):
        return Path(text)
    if not text:
        raise UserError(f"{what} was given an empty path; {fix}")
    if not folder:
        raise UserError(f"{text} names a folder{' (it ends in /)' if not last else ''}, not a file for {what}; {fix}")
    path = Path(text) if Path(text).name not in ("", "..") else Path(os.path.abspath(text))
    if not path.name:
        raise UserError(f"{text} is the root of the filesystem, which {what} cannot replace; {fix}")
    return path


def process_alive(pid: object) -> bool:
    if type(pid) is not int or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (ProcessLookupError, OverflowError):  # none, or a pid no process can have
        return False
    return True


def remove_dead_leftovers(path: str | Path) -> None:
    """Deletes what writers of `path` that died (kill -9, a power cut) left beside it, and inside it when it is a
    folder (a writer into a folder that stood stages there); a link is removed, never what it points to."""
    path = Path(path)
    pattern = f".{glob.escape(path.name)}.tmp-*"
    found: list[Path] = []
    for folder in (path.parent, path) if what_stands_at(path, follow_links=False) == "a directory" else (path.parent,):
        with suppress(OSError):
            found += sorted(folder.glob(pattern))
    for leftover in found:
        match = re.search(r"tmp-([0-9]+)(?:-[^/]*)?$", leftover.name)
        if match is None or int(match[1]) != os.getpid() and process_alive(int(match[1])):
            continue
        with suppress(OSError):  # not ours to remove after all (permissions): leave it
            _remove(leftover)


# --- paths and names a user gives -------------------------------------------------------------------------

NAME_MAX_BYTES = 255  # the longest file or folder name ext4, XFS, btrfs and APFS take (the bytes of its UTF-8)


def path_setting(text: str, setting: str, *, may_be_empty: bool = False) -> str:
    """The path that the setting `setting` (named as the user sees it: "--png_dir", "config key 'out_dir'") gives,
    checked once for every path a command reads or writes: `~` expanded as a shell would (bash leaves it as it is
    after `--key=`, and a config file never expands it), and a `UsageError` naming the setting for an empty path
    (an unset shell variable: it would mean the folder the command runs in) and for a part longer than a file
    name can be (the OS would refuse it halfway, as a traceback)."""
    if text == "" and may_be_empty:
        return text
    if not text:
        raise UsageError(
            f"{setting} is an empty path (an unset shell variable?), which would mean the folder the command "
            f"runs in; give a path"
        )
    if text.startswith("~"):
        expanded = os.path.expanduser(text)
        if expanded.startswith("~"):
            user = text[1:].split("/", 1)[0]
            raise UsageError(
                f"{setting} starts with '~{user}', but {'no home folder is set' if not user else 'no such user is'} "
                f"here; write the whole path (or ./{text} for a folder of that name)"
            )
        text = expanded
    long_part = name_too_long(text)
    if long_part is not None:
        raise UsageError(f"{setting} {long_part}; shorten it")
    return text


def name_too_long(text: str) -> str | None:
    """What is wrong with the longest part of the path `text` when it is longer than any file name can be."""
    longest = max(re.split(r"[/\\]", text), key=lambda part: len(part.encode("utf-8", "surrogatepass")))
    size = len(longest.encode("utf-8", "surrogatepass"))
    if size <= NAME_MAX_BYTES:
        return None
    return (
        f"has a part of {size} bytes ('{longest[:24]}...'), longer than the {NAME_MAX_BYTES} bytes a file or "
        f"folder name can have"
    )


# --- names --------------------------------------------------------------------------------------------------


def inside_name(name: str) -> str | None:
    """What keeps `name` from naming a place inside a folder (a run name under log_dir), in words; None when none."""
    if name.startswith(("/", "\\")) or os.path.isabs(name) or PureWindowsPath(name).drive:
        return "is an absolute path"
    parts = re.split(r"[/\\]", name)
    if ".." in parts:
        return "climbs out of its folder with '..'"
    if "" in parts:
        return "has an empty part (a '/' at an end, or '//')"
    if "." in parts:
        return "has a '.' part"
    return None


def _shown(c: str) -> str:
    if 0xDC80 <= ord(c) <= 0xDCFF:
        return f"\\x{ord(c) - 0xDC00:02x}"
    return f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c


def check_utf8(value: object, named: str, fix: str) -> None:
    """A `UsageError` naming `value` as `named` (a setting, an option) and saying `fix`, unless `value` (a name, a
    path, or a setting's value: a string, or each string of a list) can be written as UTF-8, as every name and path a
    run records must be. A byte of a file name that is not UTF-8 reaches Python as a lone surrogate (U+DC80..U+DCFF),
    which no file, checkpoint or log can hold."""
    for text in value if isinstance(value, list) else [value]:
        bad = [c for c in text if 0xD800 <= ord(c) <= 0xDFFF] if isinstance(text, str) else []
        if bad:
            first = _shown(bad[0])
            what = f"the byte {first}, which is not UTF-8" if first.startswith("\\x") else f"{first}, a lone surrogate"
            raise UsageError(f"{named} '{''.join(_shown(c) for c in text)}' holds {what}; {fix}")
