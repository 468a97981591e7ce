"""Where training runs: the device, its precision, threads and processes, whether a run fits in its memory, and
the folders it holds (`RunLock`).

The memory estimates are deliberately low (a lower bound of what training certainly needs), so a config is
refused only when it cannot fit; a config that passes and still runs out of memory is caught where it allocates
(`out_of_memory`), and both name the config key to lower.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import secrets
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from common import cores, errors
from common.errors import UsageError, UserError, warn
from common.files import (
    Kind,
    cannot,
    cannot_write,
    fresh_file,
    missing_folders,
    process_alive,
    read_record,
    remove_empty,
    replace_file,
    writable_folder,
)
from common.parsing import NotParsed, parse_int, parse_json, quoted
from common.settings import TrainConfig, pick_device
from data.corpora import GENERATED
from model.memory import parameter_count, shortfall
from model.memory import size_text as _size

try:
    import fcntl
except ImportError:  # not on Windows: there, a lock file whose owner is alive is respected instead
    fcntl = None


@dataclass
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # None: plain float32
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    threads_note: str = ""  # why it runs on fewer CPU threads than torch's default, if it does

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def setup(cfg: TrainConfig) -> Runtime:
    """Sets the CPU threads (`_set_threads`) and picks the device; under torchrun, joins the process group (nccl on
    CUDA, gloo on CPU). torchrun sets WORLD_SIZE, RANK and LOCAL_RANK for each process it starts ((1, 0, 0) without
    it); a value that is no whole number, or that no launcher sets (a rank beyond the world), is a UsageError."""
    threads_note = _set_threads(cfg)
    numbers = []
    for name, default in (("WORLD_SIZE", "1"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        text = os.environ.get(name, default)
        try:
            numbers.append(parse_int(text))
        except ValueError as exc:
            why = f" ({exc})" if isinstance(exc, NotParsed) else ""
            raise UsageError(
                f"the environment variable {name}={quoted(text)} is not a whole number{why}; torchrun "
                f"sets it: unset it to train in one process"
            ) from None
    world_size, rank, local_rank = numbers
    if not 0 <= rank < world_size or local_rank < 0:
        raise UsageError(
            f"the environment says this is process RANK={rank} (LOCAL_RANK={local_rank}) of "
            f"WORLD_SIZE={world_size}, which no launcher sets; unset them to train in one process, "
            f"or start with torchrun"
        )
    device = pick_device(cfg.device)
    if world_size > 1:
        if cfg.grad_accum % world_size:
            raise UsageError(
                f"grad_accum={cfg.grad_accum} must be a multiple of the {world_size} processes, so "
                f"each optimizer step sees the same tokens at any world size; set --grad_accum="
                f"{world_size * max(1, cfg.grad_accum // world_size)}"
            )
        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    bfloat16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device.type == "cuda")
    return Runtime(device, torch.bfloat16 if bfloat16 else None, rank, local_rank, world_size, threads_note)


def _set_threads(cfg: TrainConfig) -> str:
    """Sets torch's CPU threads: `threads` when set, else fewer than torch's default where other programs kept cores
    busy as the run started (`common.cores`); returns why it took fewer, in words ("" when it did not)."""
    if cfg.threads:
        cpus = os.cpu_count() or 1
        if cfg.threads > cpus:  # far more threads than CPUs only slows torch down, or fails to start them
            raise UsageError(
                f"--threads={cfg.threads} but this machine has {cpus} CPUs; use at most {cpus}, "
                f"or 0 for torch's default"
            )
        torch.set_num_threads(cfg.threads)
        return ""
    threads, why = cores.threads(torch.get_num_threads())
    if why:
        torch.set_num_threads(threads)
    return why


def teardown(rt: Runtime) -> None:
    if rt.distributed and dist.is_initialized():
        # Free what still holds the group (DDP's reducer sits in reference cycles) while Python is
        # fully alive: gloo work freed during interpreter shutdown can abort the process (SIGABRT).
        gc.collect()
        # Everyone arrives before anyone leaves: a process that tears down its
        # connections while another still sends makes gloo abort the latter.
        dist.barrier()
        dist.destroy_process_group()


def ranks_agree(model: torch.nn.Module) -> bool:
    """Whether every process holds exactly the same parameters (DDP's promise)."""
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


# Preparing text holds it several times over: the text, the ids as Python ints, then as numpy
# arrays. Measured on the pronoun corpus: about 1.3 kB per generated sentence, 18 bytes per
# character of a char-tokenized text; these are rounded down.
BYTES_PER_SENTENCE = 1000
BYTES_PER_TEXT_BYTE = 10


def check_corpus_fits(cfg: TrainConfig) -> None:
    """Refuses a corpus whose preparation cannot fit in memory, before it starts."""
    if cfg.dataset in GENERATED:
        need = cfg.corpus_sentences * BYTES_PER_SENTENCE
        what, fix = f"generating {cfg.corpus_sentences:,} sentences", "lower --corpus_sentences"
    elif Path(cfg.dataset).is_file():
        size = Path(cfg.dataset).stat().st_size
        need = size * BYTES_PER_TEXT_BYTE
        what, fix = f"preparing {cfg.dataset} ({_size(size)})", "use a smaller text"
    else:
        return
    free = shortfall(need, torch.device("cpu"))
    if free is not None:
        raise UserError(f"{what} needs at least {_size(need)} of memory, and {_size(free)} is free; {fix}")


def training_bytes(cfg: TrainConfig, vocab_size: int) -> dict[str, int]:
    """A lower bound on training's memory: {"parameters": weights, gradients and optimizer state,
    "activations": one micro-batch's saved activations and logits}."""
    m = cfg.model
    tokens = cfg.batch_size * m.block_size
    # Per layer and token at least: the first norm, q/k/v, attention output and projection (6 d) and, unless
    # attention-only, the second norm and the MLP's in and out (11 d more).
    per_token = m.n_layer * (6 if m.attn_only else 17) * m.n_embd + 3 * vocab_size
    return {"parameters": 16 * parameter_count(cfg.model_config(vocab_size)), "activations": 4 * tokens * per_token}


def check_training_fits(cfg: TrainConfig, vocab_size: int, device: torch.device, *, held: int = 0) -> None:
    """Refuses, naming the keys to lower, a config whose training cannot fit in `device`'s memory; `held`: bytes of
    it allocated there already (the weights of a model read to fine-tune)."""
    need = training_bytes(cfg, vocab_size)
    total = sum(need.values()) - held
    free = shortfall(total, device)
    if free is not None:
        loaded = f", of which the weights read, {_size(held)}, are loaded already" if held else ""
        raise UserError(
            f"this config needs at least {_size(total + held)} of memory to train on {device.type} "
            f"(parameters and optimizer {_size(need['parameters'])}, activations "
            f"{_size(need['activations'])}{loaded}), and {_size(free)} {'more ' if held else ''}is free; "
            f"{_keys_to_lower(cfg, need)}"
        )


def _keys_to_lower(cfg: TrainConfig, need: dict[str, int]) -> str:
    if cfg.fine_tunes:  # the model's sizes are the model's own
        if need["parameters"] >= need["activations"]:
            return f"fine-tune a smaller model than {cfg.init_from}, or use a machine with more memory"
        return f"lower --batch_size (now {cfg.batch_size:,}) or --block_size (now {cfg.model.block_size:,})"
    if need["parameters"] >= need["activations"]:
        return f"lower --n_embd (now {cfg.model.n_embd:,}) or --n_layer (now {cfg.model.n_layer:,})"
    return (
        f"lower --batch_size (now {cfg.batch_size:,}), --block_size (now {cfg.model.block_size:,}) or --n_layer "
        f"(now {cfg.model.n_layer:,})"
    )


def out_of_memory(cfg: TrainConfig) -> contextlib.AbstractContextManager:
    """An allocation that fails inside becomes one line naming the keys to lower."""
    return errors.out_of_memory(
        lambda exc: UserError(
            f"ran out of memory ({' '.join(str(exc).split())[:120] or type(exc).__name__}); "
            f"{_keys_to_lower(cfg, training_bytes(cfg, vocab_size=1))}"
        )
    )


# --- a TensorBoard run of its own for every run -----------------------------------------------------------

EVENTS = "events.out.tfevents.*"  # the files TensorBoard reads a run's points from


def default_run_name(name: str) -> str:
    """The TensorBoard run name of a run not given one: `name` (the config's or the text's, cut to a length any
    folder takes), the time, the process id and a short random part, so that runs started in the same second (a
    parallel sweep, or two runs of one program) never share a name."""
    return f"{name[:100]}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{secrets.token_hex(2)}"


OWNER = ".gptwatch-run"  # in a run folder: which run logs there, and whether it has saved a checkpoint yet


def new_run_id() -> str:
    """The identity of a new run, recorded in its checkpoint and in its TensorBoard run folder (`claim_run_folder`):
    a resume continues the run its checkpoint records wherever its folders have moved since, and nothing else does."""
    return secrets.token_hex(8)


@dataclass
class RunFolder:
    """A TensorBoard run folder as `claim_run_folder` made it this run's: `run`, the run's id (None for a run
    resumed from a checkpoint that records none), and whether the run has saved a checkpoint yet. Until it has,
    the folder holds nothing a resume could continue, and the next run under its name takes it over; the trainer's
    `on_save`, before each save, records that it has."""

    folder: Path
    run: str | None
    saved: bool

    def on_save(self, trainer: object) -> None:
        if not self.saved:
            self.saved = True
            self.record()

    def record(self) -> None:
        with contextlib.suppress(OSError):  # a disk that fails here fails TensorBoard's writer next, with a warning
            self.folder.mkdir(parents=True, exist_ok=True)
            claim = json.dumps({"run": self.run, "saved": self.saved}).encode("utf-8")
            replace_file(self.folder / OWNER, lambda fh: fh.write(claim))


def claim_run_folder(folder: Path, log_dir: Path, run: str | None, *, recorded: bool, saved: bool) -> RunFolder:
    """Makes the TensorBoard run folder `folder` (inside `log_dir`) the run `run`'s, once `check_run_folder` finds
    it may be: the logs of a run that stopped before saving anything are removed, with a warning, and the folder
    records the run and whether it has `saved` a checkpoint (a resumed run has)."""
    if check_run_folder(folder, log_dir, run, recorded=recorded):
        for events in list(folder.rglob(EVENTS)):
            events.unlink()
        warn(
            f"{folder} held the TensorBoard logs of a run that stopped before it saved a checkpoint, so "
            f"nothing can resume it; this run's logs replace them"
        )
    claim = RunFolder(folder, run, saved)
    claim.record()
    return claim


def check_run_folder(folder: Path, log_dir: Path, run: str | None, *, recorded: bool) -> bool:
    """A `UserError` when this run's points would join another run's lines in the TensorBoard run folder `folder`
    (inside `log_dir`): the folder (or one inside it) holds event files that another run wrote, which saved a
    checkpoint; or it lies inside the folder of another run (a run's per-head folders, RUN/L0H0, are runs of
    TensorBoard's too). The run `run` (its id: a resume's is its checkpoint's, a new run's is new) writes on in the
    folder that records it, and in one written before runs recorded themselves there (or by a run of a checkpoint
    that records no id) when the checkpoint it resumes records this name (`recorded`). Returns whether the folder
    holds only the logs of a run that stopped before saving a checkpoint (killed, diverged, or refused a
    file before it trained), which keep no name: this run may take them over."""
    for above in folder.parents:
        if next(above.glob(EVENTS), None) is not None:
            raise UserError(
                f"the TensorBoard run {folder} lies inside {above}, the folder of another run, whose lines it "
                f"would join; choose a --run_name outside it"
            )
        if above == log_dir or above == above.parent:
            break
    found = next(folder.rglob(EVENTS), None) if folder.is_dir() else None
    claim = read_record(folder / OWNER) if found is not None else {}
    owner = claim.get("run") if isinstance(claim.get("run"), str) else None
    if found is None or (owner is not None and owner == run):
        return False
    if owner is not None and claim.get("saved") is False:
        return True
    if owner is None and recorded:
        return False
    raise UserError(
        f"the TensorBoard run {folder} holds another run's logs ({found.name}), which this run's would "
        f"join in the same lines; choose another --run_name, or move that folder away"
    )


# --- one training run per out_dir, and per TensorBoard run folder (log_dir/run_name), at a time ----------


# How a lock file is known (its first bytes, written with it): only such a file is ever taken over or removed.
LOCK = Kind.starting("a gptwatch run lock", b'{"gptwatch": "run lock", ')
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


class RunLock:
    """`with RunLock(out_dir):` holds out_dir for one run; a `UserError` names the run that holds it.

    Why: two runs saving into one out_dir would each replace the other's checkpoint, and each would keep the
    other's as ckpt.prev.pt, destroying the user's earlier run; two runs logging into one TensorBoard run folder
    would interleave their event files, and TensorBoard would drop one run's points. So a run holds an exclusive
    `fcntl.flock` on `folder/.lock` for as long as it lives, which the kernel drops when the process ends however it
    ends (kill -9 included), on a file that names its owner (pid, host, start time, command) so a second run can say
    who is using the folder, after the header it is known by (`LOCK`): a `.lock` of the user's is never written or
    removed. A lock file left by a run that was killed is held by nobody: the next run takes it over and says whose
    it was. A disk too full for the lock is one `UserError`. A run whose folder is deleted under it, or whose lock
    file is replaced, finds out before its next save (`check`) and stops rather than write over another run's
    checkpoint.

    `key` is the
    setting that names the folder, `what` the folder in words and `option` the setting that picks another one;
    `say_takeover=False` takes over a lock left by a run that has ended without a warning."""

    def __init__(
        self,
        folder: str | Path,
        *,
        key: str = "out_dir",
        what: str | None = None,
        option: str | None = None,
        say_takeover: bool = True,
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / ".lock"
        self.key = key
        self.what = what or key
        self.option = option or f"--{key}"
        self.say_takeover = say_takeover
        self._fd: int | None = None
        self._made: list[Path] = []  # the folders this lock made: a run that wrote nothing there leaves none
        command = " ".join(["python", *sys.argv])
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        self._content = LOCK.header + json.dumps({**owner, "command": command}).encode("utf-8")[1:]  # the whole file

    def __enter__(self) -> RunLock:
        self._made = missing_folders(self.folder)
        writable_folder(self.folder, self.key)
        try:
            while True:
                fd, created = self._open()
                try:
                    self._lock(fd)
                except BaseException:
                    os.close(fd)
                    raise
                if self._is_current(fd):
                    break
                os.close(fd)  # the owner removed the file between our open and our lock: try again
        except BaseException:
            remove_empty(self._made)  # a run that could not start leaves no trace
            raise
        self._fd = fd
        if not created:  # a lock left by a run that has ended: ours now
            previous = _owner(fd)
            if self.say_takeover:
                warn(f"{self.path} was left by a run that has ended ({_describe(previous)}); taking it over")
            content = self._content
            self._written(lambda: (os.lseek(fd, 0, os.SEEK_SET), os.write(fd, content), os.ftruncate(fd, len(content))))
        return self

    def _written(self, write: Callable[[], object]) -> object:
        """`write()`; its OSError (a full disk) one `UserError`, with this lock released."""
        try:
            return write()
        except OSError as exc:
            self.__exit__()
            raise UserError(
                cannot_write(f"the run lock {self.path}", self.path, exc, f"choose another {self.option}")
            ) from None

    def check(self) -> None:
        """A `UserError` when the lock file was deleted with the folder, or replaced (another run took it over)."""
        if self._fd is not None and not self._is_current(self._fd):
            raise UserError(
                f"{self.what} {self.folder} was deleted or taken over by another run while this one ran "
                f"(its lock {self.path} is no longer the one this run holds); stopping without writing "
                f"there, so what is there now stays as it is: start this run again with another "
                f"{self.option}"
            )

    def __exit__(self, *exc: object) -> None:
        """Removes the lock file (still locked, so nobody takes a file on its way out) and unlocks it."""
        if self._fd is None:
            return
        try:
            if self._is_current(self._fd):
                self.path.unlink()
                remove_empty(self._made)  # a run that stopped before writing leaves no trace
        except OSError:
            pass  # the folder holds files, went away or became read-only: the kernel still drops the lock below
        finally:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> tuple[int, bool]:
        """The lock file open, and whether this run made it: a new one is made whole, its owner written, under a
        name of its own, then linked into place (never an empty lock, which could be a file of the user's). One that
        stands there is opened only when it is a lock (`LOCK`): a file of the user's or a link is left as it is."""
        LOCK.check(self.path, f"choose another {self.option}", "the run lock")
        created = False
        if not os.path.lexists(self.path):
            fd, staged = fresh_file(self.path)
            try:
                created = self._written(lambda: self._create(fd, staged))
            finally:
                os.close(fd)
                staged.unlink(missing_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | NO_FOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise UserError(f"{cannot('open the run lock', self.path, exc)}; choose another {self.option}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not LOCK.bears(os.read(fd, len(LOCK.header))):
            os.close(fd)
            raise UserError(
                f"{self.path} is not a run lock, so it cannot lock {self.what} for this run; move it away, or choose "
                f"another {self.option}"
            )
        return fd, created

    def _create(self, fd: int, staged: Path) -> bool:
        """Whether this run made the lock file, from `staged` (open as `fd`): False when another run made it first."""
        os.write(fd, self._content)
        try:
            os.link(staged, self.path)
        except FileExistsError:
            return False  # another run made it meanwhile: open theirs
        except OSError:  # a filesystem without hard links: made in place, its owner written at once
            with open(self.path, "xb") as fh:  # "x": only where nothing stands, not even a link
                fh.write(self._content)
        return True

    def _lock(self, fd: int) -> None:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise UserError(
                        f"cannot lock {self.path} ({exc.strerror or exc}); this filesystem does "
                        f"not support locks: choose a --{self.key} on a local disk"
                    ) from None
        owner = _owner(fd)
        alive = owner and owner.get("host") == socket.gethostname() and process_alive(owner.get("pid"))
        if fcntl is None and not alive:  # no kernel lock here: a lock file whose owner has ended is free
            return
        raise UserError(
            f"{self.what} {self.folder} is in use by another training run ({_describe(owner)}); wait for it to "
            f"finish or stop it, or choose another {self.option}"
        )

    def _is_current(self, fd: int) -> bool:
        """Whether the lock file's path still leads to the file `fd` has open."""
        try:
            now, ours = os.stat(self.path), os.fstat(fd)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino)


def _owner(fd: int) -> dict:
    """What the lock file says of its owner (written whole, after its header, before it is linked into place);
    {"pid": "unknown"} when it cannot be read or holds no table."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        owner = parse_json(os.read(fd, 4096))
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
