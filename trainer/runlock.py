"""One training run per out_dir, and per TensorBoard run folder (log_dir/run_name), at a time.

Two runs saving into one out_dir would each replace the other's checkpoint, and each would keep the other's as
ckpt.prev.pt, destroying the user's earlier run; two runs logging into one TensorBoard run folder would interleave
their event files, and TensorBoard would drop one run's points. So a run holds an exclusive `fcntl.flock` on
`FOLDER/.lock` for as long as it lives, which the kernel drops when the process ends however it ends (kill -9
included), on a file that names its owner (pid, host, start time, command), so a second run can say who is using
the folder. A lock file left by a run that was killed is held by nobody: the next run takes it over. A run whose
folder is deleted under it, or whose lock file is replaced by another run's, finds out before its next save
(`check`) and stops rather than write over the other run's checkpoint.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

from cli import UserError, warn
from files import NotParsed, parse_json, process_alive, writable_folder

try:
    import fcntl
except ImportError:  # not on Windows: there, a lock file whose owner is alive is respected instead
    fcntl = None

LOCK_NAME = ".lock"


class RunLock:
    """`with RunLock(out_dir):` holds out_dir for one run; a `UserError` names the run that holds it. `key` is the
    setting that names the folder, `what` the folder in words and `option` the setting that picks another one;
    `say_takeover=False` takes over a lock left by a run that has ended without a warning."""

    def __init__(self, folder: str | Path, *, key: str = "out_dir", what: str | None = None,
                 option: str | None = None, say_takeover: bool = True) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.key = key
        self.what = what or key
        self.option = option or f"--{key}"
        self.say_takeover = say_takeover
        self._fd: int | None = None
        self._made = False   # whether this lock made the folder: a run that wrote nothing there leaves none

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        self._made = not self.folder.exists()
        writable_folder(self.folder, self.key)
        while True:
            fd = self._open()
            try:
                self._lock(fd)
            except BaseException:
                os.close(fd)
                raise
            if self._is_current(fd):
                break
            os.close(fd)  # the owner removed the file between our open and our lock: try again
        previous = _owner(fd)
        if previous and self.say_takeover:
            warn(f"{self.path} was left by a run that has ended ({_describe(previous)}); taking it over")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join(["python", *sys.argv])}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(info).encode("utf-8"))
        self._fd = fd

    def check(self) -> None:
        """A `UserError` when the lock file was deleted with the folder, or replaced (another run took it over)."""
        if self._fd is not None and not self._is_current(self._fd):
            raise UserError(f"{self.what} {self.folder} was deleted or taken over by another run while this one ran "
                            f"(its lock {self.path} is no longer the one this run holds); stopping without writing "
                            f"there, so what is there now stays as it is: start this run again with another "
                            f"{self.option}")

    def release(self) -> None:
        """Removes the lock file (still locked, so nobody takes a file on its way out) and unlocks it."""
        if self._fd is None:
            return
        try:
            if self._is_current(self._fd):
                self.path.unlink()
                if self._made:
                    self.folder.rmdir()   # only when empty: a run that stopped before writing leaves no trace
        except OSError:
            pass  # the folder holds files, went away or became read-only: the kernel still drops the lock below
        finally:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        try:
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise UserError(f"cannot open the run lock {self.path} ({exc.strerror or exc}); if it is a link or "
                            f"a folder, move it away, or choose another {self.option}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UserError(f"{self.path} is not a regular file, so it cannot lock {self.what} for this run; move it "
                            f"away, or choose another {self.option}")
        return fd

    def _lock(self, fd: int) -> None:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise UserError(f"cannot lock {self.path} ({exc.strerror or exc}); this filesystem does "
                                    f"not support locks: choose a --{self.key} on a local disk") from None
        else:
            owner = _owner(fd)
            if not owner or owner.get("host") != socket.gethostname() or not process_alive(owner.get("pid")):
                return
        owner = _owner(fd)
        who = _describe(owner) if owner else "its details are not written yet"
        raise UserError(f"{self.what} {self.folder} is in use by another training run ({who}); wait for it to "
                        f"finish or stop it, or choose another {self.option}")

    def _is_current(self, fd: int) -> bool:
        """Whether the lock file's path still leads to the file `fd` has open."""
        try:
            now, ours = os.stat(self.path), os.fstat(fd)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino)


def _owner(fd: int) -> dict:
    """What the lock file says of its owner; {} when it is empty or unreadable."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        owner = parse_json(os.read(fd, 4096) or b"{}")
    except (OSError, NotParsed):
        return {"pid": "unknown"}
    return owner if isinstance(owner, dict) else {"pid": "unknown"}


def _describe(owner: dict) -> str:
    text = f"pid {owner.get('pid', 'unknown')}"
    if owner.get("host"):
        text += f" on {owner['host']}"
    if owner.get("started"):
        text += f", started {owner['started']}"
    if owner.get("command"):
        text += f": {str(owner['command'])[:200]}"
    return text
