"""Every bad input gets one line on stderr that names the problem and the fix,
a non-zero exit (2: command line or config, 1: data, checkpoints, files), no
traceback (`--debug` shows one), and leaves existing files untouched.

The table below is also the table of docs/errors.md, with each message exactly
as printed: `python tests/test_bad_input.py --write` refreshes it there.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest
import torch
from conftest import Trained, train_tiny_checkpoints

from data import corpora
from tests.commands import ROOT, TEXT, run, tiny_args
from watch.show.heatmaps import sentence_slug

DOC = ROOT / "docs" / "errors.md"
SECTIONS = {
    "error": ("<!-- cases:start -->", "<!-- cases:end -->"),
    "warning": ("<!-- warnings:start -->", "<!-- warnings:end -->"),
}


class Workspace:
    """A folder with a corpus, a config and a trained checkpoint in out/ (char) and gpt2/ (GPT-2 BPE)."""

    def __init__(self, root: Path, trained: Trained) -> None:
        self.root = root
        self.out = root / "out"
        for name in ("out", "gpt2"):
            trained.copy_to(root / name, "char" if name == "out" else name)

    def train(self, *extra: str, config: str | None = None) -> list[str]:
        args = tiny_args(self.root, *extra)
        if config is not None:
            args[0] = config
        return args

    def sample(self, *extra: str, out: Path | str | None = None) -> list[str]:
        looks = any(
            a.startswith(("--attention", "--probes", "--heads", "--patch", "--export")) for a in extra
        )  # no text
        exports = "--export" in extra  # converts on the CPU, and refuses --device
        return [
            f"--out_dir={out or self.out}",
            *([] if looks else ["--max_new_tokens=5"]),
            *([] if exports else ["--device=cpu"]),
            *extra,
        ]

    def file(self, name: str, content: str | bytes) -> str:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def fifo(self, name: str) -> str:
        """A named pipe: reading it would wait forever for a writer."""
        path = self.root / name
        os.mkfifo(path)
        return str(path)

    def probes(self, *records: dict) -> str:
        return self.file("probes.jsonl", "".join(json.dumps(r) + "\n" for r in records))

    def checkpoint(self, folder: str, damage: Callable[[Path, bytes], None]) -> Path:
        """A folder whose ckpt.pt is the trained one after `damage(path, good_bytes)`."""
        path = self.root / folder / "ckpt.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        damage(path, (self.out / "ckpt.pt").read_bytes())
        return path.parent


def _truncate(path: Path, good: bytes) -> None:
    path.write_bytes(good[: len(good) // 2])


def _random_bytes(path: Path, good: bytes) -> None:
    path.write_bytes(bytes(range(256)) * 8)


def _plain_tensor(path: Path, good: bytes) -> None:
    torch.save(torch.zeros(3), path)


def _pickled(path: Path, good: bytes) -> None:
    # Saving the parsed arguments along with the weights is common; unpickling such an object could run code.
    torch.save({"format": "gptwatch-checkpoint", "format_version": 1, "args": argparse.Namespace(lr=0.1)}, path)


def _other_version(path: Path, good: bytes) -> None:
    path.write_bytes(good)
    torch.save({**torch.load(path, weights_only=True), "format_version": 99}, path)


def _edited(change: Callable[[dict], None]) -> Callable[[Path, bytes], None]:
    """A damage that loads the good checkpoint, changes its contents and saves it again."""

    def damage(path: Path, good: bytes) -> None:
        path.write_bytes(good)
        checkpoint = torch.load(path, weights_only=True)
        change(checkpoint)
        torch.save(checkpoint, path)

    return damage


def _optimizer_moments_of_another_model(checkpoint: dict) -> None:
    for state in checkpoint["optimizer"]["state"].values():
        state["exp_avg"] = torch.zeros(3)


_no_model_config = _edited(lambda p: p.pop("model_config"))
_wider_config = _edited(lambda p: p["model_config"].update(n_embd=32))
_no_optimizer = _edited(lambda p: p.pop("optimizer"))
_other_moments = _edited(_optimizer_moments_of_another_model)
_broken_tokenizer = _edited(lambda p: p.update(tokenizer={"name": "char", "chars": 5}))
# A checkpoint whose prepared data is gone: no record of it, and a data_dir that does not exist.
_data_gone = _edited(lambda p: (p.pop("data", None), p["train_config"].update(data_dir="/nonexistent/prepared")))


def _nanogpt(path: Path, good: bytes) -> None:
    """What nanoGPT's train.py saves: its weights, sizes, step and config, and no gptwatch format."""
    args = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32, "bias": True, "vocab_size": 65, "dropout": 0.0}
    torch.save({"model": {}, "model_args": args, "iter_num": 0, "best_val_loss": 4.0, "config": {}}, path)


def _nan_weights(checkpoint: dict) -> None:
    checkpoint["model"]["wte.weight"].view(-1)[:3] = float("nan")


def _inf_moment(checkpoint: dict) -> None:
    next(iter(checkpoint["optimizer"]["state"].values()))["exp_avg"].view(-1)[0] = float("inf")


def _without_newline(checkpoint: dict) -> None:
    checkpoint["tokenizer"]["chars"] = checkpoint["tokenizer"]["chars"].replace("\n", "~")


def _trained_here(path: Path, good: bytes) -> None:
    """The trained checkpoint, recording the workspace's copy of its corpus as the text it was trained on."""
    _edited(lambda p: p["data"].update(source=str(path.parent.parent / "corpus.txt")))(path, good)


_nan_weight = _edited(_nan_weights)


def _fine_tuned_from_gone(path: Path, good: bytes) -> None:
    """The trained checkpoint, as if fine-tuned from a model in the workspace that is no longer there."""
    _edited(lambda p: p["train_config"].update(init_from=str(path.parent.parent / "gone")))(path, good)


_inf_optimizer_state = _edited(_inf_moment)
_no_data_record = _edited(lambda p: p.pop("data"))  # as checkpoints were written before it was recorded
_run_name_escapes = _edited(lambda p: p.update(run_name="../../escaped"))
_no_newline = _edited(_without_newline)
# The same characters as the corpus the checkpoints were trained on, in another order: another text.
OTHER_TEXT = "".join(reversed(TEXT.splitlines(keepends=True)))
DEEP = 100_000  # brackets: far beyond Python's recursion limit
NOT_UTF8 = "caf\udce9"  # the Latin-1 file name 'café' as Python's sys.argv holds it on a UTF-8 system


def _rebuilt(**settings) -> Callable[[Path, bytes], None]:
    """The same checkpoint's model with the model settings `settings` (fresh weights of that shape)."""

    def change(checkpoint: dict) -> None:
        from model.config import GPTConfig
        from model.gpt import GPT

        config = {**checkpoint["model_config"], **settings}
        checkpoint.update(model_config=config, model=GPT(GPTConfig(**config)).state_dict())

    return _edited(change)


_modern_bias = _rebuilt(arch="modern", bias=True)
_relative = _rebuilt(relative_positions=True)


def _made_modern(**claims) -> Callable[[Path, bytes], None]:
    """The checkpoint's model made "modern" (fresh weights of its sizes), its model_config then claiming `claims`,
    which no tensor of a modern model can contradict (its head count, its block_size)."""

    def change(checkpoint: dict) -> None:
        from model.config import GPTConfig
        from model.gpt import GPT

        config = {**checkpoint["model_config"], "arch": "modern"}
        checkpoint.update(model_config={**config, **claims}, model=GPT(GPTConfig(**config)).state_dict())

    return _edited(change)


def _cut_to_block_1(checkpoint: dict) -> None:
    """The model of block_size 1 (one position), as trained with --block_size=1."""
    checkpoint["model_config"]["block_size"] = 1
    checkpoint["model"]["wpe.weight"] = checkpoint["model"]["wpe.weight"][:1].clone()


_odd_head_size = _made_modern(n_head=16)  # 16 wide: heads of 1 feature, which rotary cannot turn
_billion_positions = _made_modern(block_size=10**9)
_million_positions = _made_modern(block_size=2**20)
_block_1 = _edited(_cut_to_block_1)
_huge_seed = _edited(lambda p: p["train_config"].update(seed=2**70))
_nul_in_data_dir = _edited(lambda p: p["train_config"].update(data_dir="data/pre\x00pared"))
_huge_step = _edited(lambda p: p.update(step=2**70))


def _without(package: str) -> Callable[[pytest.MonkeyPatch], None]:
    """An optional library made absent: importing it fails, whether or not it is installed here."""

    def patch(mp: pytest.MonkeyPatch) -> None:
        mp.setitem(sys.modules, package, None)

    return patch


class _FillingFile:
    """A file on a disk that fills up after `room` bytes: writes then fail as a full disk's do."""

    def __init__(self, fh, room: int) -> None:
        self.fh, self.room = fh, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.fh.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.fh.write(data)

    def __getattr__(self, name: str):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.fh.close()


def _disk_full(mp: pytest.MonkeyPatch) -> None:
    """Every file written whole (`files.replace_file`: a checkpoint, an export) fills the disk after 1000 bytes:
    torch.save meets the error inside its zip writer, which reports it as a RuntimeError about file positions."""
    from common import files

    mp.setattr(files, "open", lambda fd, mode: _FillingFile(open(fd, mode), room=1000), raising=False)


def _export_disk_full(mp: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformer_lens", reason="--export tl needs transformer-lens (requirements-interop.txt)")
    _disk_full(mp)


def _little_memory(mp: pytest.MonkeyPatch) -> None:
    """64 MiB free, on any device."""
    mp.setattr("model.memory.available_memory", lambda device: 64 * 2**20)


def _torch_interrupted(ws: Workspace, *, caught: bool = False) -> dict[str, str]:
    """An environment in which importing torch is interrupted by Ctrl-C (a SIGINT the import sends itself),
    as when a user presses it while a command starts; `caught`: the import catches the interrupt and fails later
    with another error, as numpy's does."""
    package = ws.root / "interrupting" / "torch"
    package.mkdir(parents=True)
    sent = "os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)"
    if caught:
        sent = (
            f"try:\n    {sent.replace(chr(10), chr(10) + '    ')}\nexcept BaseException:\n    pass\nraise ImportError"
        )
    (package / "__init__.py").write_text(f"import os, signal, time\n{sent}\n")
    return {"PYTHONPATH": str(package.parent)}


def _interrupt(*args, **kwargs) -> None:
    raise KeyboardInterrupt


def _log_dir_full(mp: pytest.MonkeyPatch) -> None:
    """TensorBoard's writer thread finds the disk full, as it writes its first event."""

    def append(self, filename, file_content, binary_mode=False):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    mp.setattr("tensorboard.compat.tensorflow_stub.io.gfile.LocalFileSystem.append", append)


@contextlib.contextmanager
def _another_run_holds_out(ws: Workspace):
    """out/ locked by a run whose lock file says it is pid 4242 on another machine."""
    from trainer.runtime import RunLock

    with RunLock(ws.out) as lock:
        owner = {
            "pid": 4242,
            "host": "other-host",
            "started": "2025-01-01 12:00:00",
            "command": "python train.py configs/pronouns.toml",
        }
        lock.path.write_bytes(_lock_file(owner))
        yield


def _lock_file(owner: dict) -> bytes:
    """A run lock as train.py writes one: its header, then what it says of its owner."""
    from trainer.runtime import LOCK

    return LOCK.header + json.dumps(owner).encode()[1:]


@contextlib.contextmanager
def _lock_left_by_a_killed_run(ws: Workspace):
    owner = {"pid": 999999999, "host": "this-host", "started": "2025-01-01 12:00:00", "command": "python train.py"}
    ws.file("new/.lock", _lock_file(owner))
    yield


@contextlib.contextmanager
def _damaged_cache(ws: Workspace):
    from data.prepare import prepare

    ws.file("corpus.txt", TEXT)
    prepared = prepare(str(ws.root / "corpus.txt"), "char", ws.root / "prep", quiet=True)
    (prepared.folder / "train.bin").write_bytes(b"\x01\x02\x03")
    yield


@contextlib.contextmanager
def _another_run_logs_to_the_run_name(ws: Workspace):
    """runs/t, the TensorBoard folder of the run name the tests use, locked by a run on another machine."""
    from trainer.runtime import RunLock

    with RunLock(ws.root / "runs" / "t") as lock:
        owner = {"pid": 4242, "host": "other-host", "started": "2025-01-01 12:00:00", "command": "python train.py"}
        lock.path.write_bytes(_lock_file(owner))
        yield


@contextlib.contextmanager
def _nested_lock_left_by_a_killed_run(ws: Workspace):
    from trainer.runtime import LOCK

    ws.file("new/.lock", LOCK.header + b"[" * DEEP)
    yield


def _lock_disk_full(mp: pytest.MonkeyPatch) -> None:
    """The disk is full where the run lock is written (simulated: writing it fails as a full disk's writes do)."""

    def full(self, fd: int, staged: Path) -> bool:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    mp.setattr("trainer.runtime.RunLock._create", full)


def _ctrl_c_at_the_first_step(mp: pytest.MonkeyPatch) -> None:
    """Training stopped by Ctrl-C right after its first step, as its stop handler stops it."""
    from trainer.trainer import Trainer

    mp.setattr(Trainer, "_loop", lambda self, received, result, started: (self.step(), signal.SIGINT)[1])


@contextlib.contextmanager
def _two_earlier_runs(ws: Workspace):
    """out/ holding an earlier run in ckpt.pt and another kept before it in ckpt.prev.pt."""
    (ws.out / "ckpt.prev.pt").write_bytes((ws.out / "ckpt.pt").read_bytes())
    yield


def _link_named(name: str):
    """A symbolic link at `name` (under the workspace) to a file of someone else's."""

    @contextlib.contextmanager
    def setup(ws: Workspace):
        (ws.root / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / name).symlink_to(ws.file("precious.txt", "someone's file\n"))
        yield

    return setup


@contextlib.contextmanager
def _users_file_as_the_lock(ws: Workspace):
    ws.file("out/.lock", '{"note": "the lock of my own script"}\n')
    yield


@contextlib.contextmanager
def _nested_cache_meta(ws: Workspace):
    from data.prepare import prepare

    ws.file("corpus.txt", TEXT)
    prepared = prepare(str(ws.root / "corpus.txt"), "char", ws.root / "prep", quiet=True)
    (prepared.folder / "meta.json").write_text("[" * DEEP)
    yield


@contextlib.contextmanager
def _damaged_tiktoken_cache(ws: Workspace):
    """TIKTOKEN_CACHE_DIR holding a file of the right name for GPT-2's BPE, with the wrong contents."""
    import hashlib

    from data import tokenizer

    ws.file(f"tiktoken/{hashlib.sha1(tokenizer.R50K_URL.encode()).hexdigest()}", "not the BPE ranks\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(ws.root / "tiktoken"))
        mp.setattr(tokenizer, "_CHECKED", set())  # look at the cache again, as a new process would
        yield


@contextlib.contextmanager
def _fifo_tiktoken_cache(ws: Workspace):
    """TIKTOKEN_CACHE_DIR holding a named pipe under the name of GPT-2's BPE file: reading it would wait forever."""
    import hashlib

    from data import tokenizer

    (ws.root / "tiktoken").mkdir()
    ws.fifo(f"tiktoken/{hashlib.sha1(tokenizer.R50K_URL.encode()).hexdigest()}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(ws.root / "tiktoken"))
        mp.setattr(tokenizer, "_CHECKED", set())
        yield


@contextlib.contextmanager
def _link_as_the_lock(ws: Workspace):
    (ws.out / ".lock").symlink_to(ws.file("precious.txt", "someone's file\n"))
    yield


@contextlib.contextmanager
def _hub_offline(ws: Workspace):
    """The Hugging Face hub unreachable (offline mode) and an empty cache in the workspace."""
    constants = pytest.importorskip(
        "huggingface_hub.constants", reason="huggingface-hub is optional (requirements-interop.txt)"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(constants, "HF_HUB_CACHE", str(ws.root / "hf-cache"))
        mp.setattr(constants, "HF_HUB_OFFLINE", True)
        yield


AGREEMENT_LINE = json.dumps({"text": "the king and", "pronoun": "he"}) + "\n"
SHORT_PROBE = {"text": "cat and dog it", "pronoun": "it", "referent": "cat", "distractor": "dog"}
TEXT_TWICE = '{"text": "x", ' + json.dumps(SHORT_PROBE)[1:] + "\n"  # a probe line whose "text" comes twice
LONG_PROBE = {
    "text": "the dog saw the ball and it rolled away and the cat saw it",
    "pronoun": "it",
    "referent": "ball",
    "distractor": "dog",
}


# Continuations whose first character is the same for both nouns, so a char model tells them apart by none.
BARKED_BOWLED = {
    "text": "a dog saw a ball and it ran",
    "pronoun": "it",
    "referent": "dog",
    "distractor": "ball",
    "continuations": ["barked"],
    "distractor_continuations": ["bowled"],
}


@dataclass
class Case:
    id: str
    problem: str
    program: str  # train or sample
    args: Callable[[Workspace], list[str]]
    code: int
    words: tuple[str, ...]  # what the message must name
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    exact: bool = True  # False: the message may differ across machines, so docs/errors.md shows one instance
    setup: Callable[[Workspace], AbstractContextManager] | None = None  # held while the command runs
    may_change: tuple[str, ...] = ()  # for a warning: files (globs under the workspace) it may rewrite
    env: Callable[[Workspace], dict[str, str]] | None = None  # the environment of a real process, run as one
    warning: bool = False  # a warning whatever the exit status (a run stopped by a signal exits 128 + its number)

    @property
    def kind(self) -> str:
        return "warning" if self.code == 0 or self.warning else "error"


CASES = [
    # --- data -------------------------------------------------------------------------------------------
    Case(
        "data-missing",
        "dataset file does not exist",
        "train",
        lambda w: w.train(f"--dataset={w.root / 'missing.txt'}"),
        1,
        ("neither a corpus name nor an existing file", ", ".join(corpora.NAMES)),
    ),
    Case(
        "data-unknown-corpus",
        "dataset is not a corpus name (typo)",
        "train",
        lambda w: w.train("--dataset=shakespear"),
        1,
        ("did you mean 'shakespeare'",),
    ),
    Case(
        "data-directory",
        "dataset is a directory",
        "train",
        lambda w: w.train(f"--dataset={w.root}"),
        1,
        ("is a directory",),
    ),
    Case(
        "data-empty",
        "dataset file is empty",
        "train",
        lambda w: w.train(f"--dataset={w.file('empty.txt', '')}"),
        1,
        ("is empty",),
    ),
    Case(
        "data-not-utf8",
        "dataset file is not UTF-8 (Latin-1)",
        "train",
        lambda w: w.train(f"--dataset={w.file('latin1.txt', 'café au lait '.encode('latin-1') * 50)}"),
        1,
        ("not UTF-8", "offset 3", "iconv"),
    ),
    Case(
        "data-too-short",
        "text shorter than block_size + 2 tokens",
        "train",
        lambda w: w.train(f"--dataset={w.file('short.txt', 'the dog saw the cat')}"),
        1,
        ("fewer than block_size + 2 = 34", "too few for both splits", "--block_size of at most 7"),
    ),
    Case(
        "data-val-too-short",
        "a val_fraction too small for a long enough text",
        "train",
        lambda w: w.train("--val_fraction=0.001"),
        1,
        ("val split has 3 tokens", "--val_fraction=", "or more"),
    ),
    Case(
        "data-train-too-short",
        "a val_fraction that leaves too little to train on",
        "train",
        lambda w: w.train("--val_fraction=0.999"),
        1,
        ("train split has 4 tokens", "--val_fraction=", "or less"),
    ),
    Case(
        "data-not-regular",
        "dataset is a named pipe (FIFO)",
        "train",
        lambda w: w.train(f"--dataset={w.fifo('pipe.txt')}"),
        1,
        ("not a regular file",),
    ),
    Case(
        "data-nul-bytes",
        "dataset file of NUL bytes",
        "train",
        lambda w: w.train(f"--dataset={w.file('zeros.txt', bytes(5000))}"),
        1,
        ("NUL bytes", "binary"),
    ),
    Case(
        "data-utf16",
        "dataset file in UTF-16 with its byte-order mark",
        "train",
        lambda w: w.train(f"--dataset={w.file('u16.txt', (TEXT * 3).encode('utf-16'))}"),
        1,
        ("looks like UTF-16LE text, not UTF-8", "iconv -f UTF-16LE -t UTF-8"),
    ),
    Case(
        "data-utf16-big-endian",
        "dataset file in UTF-16, big-endian, without a byte-order mark",
        "train",
        lambda w: w.train(f"--dataset={w.file('u16.txt', (TEXT * 3).encode('utf-16-be'))}"),
        1,
        ("looks like UTF-16BE text",),
    ),
    Case(
        "data-one-character",
        "dataset file of one character",
        "train",
        lambda w: w.train(f"--dataset={w.file('a.txt', 'a')}"),
        1,
        ("one kind of token only ('a', once)", "nothing to predict"),
    ),
    Case(
        "data-one-token",
        "dataset file of one character repeated",
        "train",
        lambda w: w.train(f"--dataset={w.file('a.txt', 'a' * 5000)}"),
        1,
        ("one kind of token only ('a', 5,000 times)",),
    ),
    Case(
        "data-too-big",
        "a generated corpus too large for memory",
        "train",
        lambda w: w.train("--dataset=pronouns", "--corpus_sentences=10000000000000"),
        1,
        ("generating 10,000,000,000,000 sentences needs at least", "lower --corpus_sentences"),
        exact=False,
    ),
    # --- config -------------------------------------------------------------------------------------------
    Case(
        "cli-unknown-key",
        "unknown key on the command line",
        "train",
        lambda w: w.train("--n_layers=2"),
        2,
        ("unknown config key 'n_layers'", "did you mean 'n_layer'"),
    ),
    Case(
        "toml-unknown-key",
        "unknown key in the TOML file",
        "train",
        lambda w: w.train(config=w.file("c.toml", "learning_rat = 0.01\n")),
        2,
        ("unknown config key 'learning_rat'", "did you mean 'learning_rate'"),
    ),
    Case(
        "cli-wrong-type",
        "wrong type on the command line",
        "train",
        lambda w: w.train("--n_layer=two"),
        2,
        ("'n_layer'", "must be an integer", "'two'"),
    ),
    Case(
        "toml-wrong-type",
        "wrong type in the TOML file",
        "train",
        lambda w: w.train(config=w.file("c.toml", 'n_layer = "4"\n')),
        2,
        ("'n_layer'", "must be an integer"),
    ),
    Case(
        "cli-bad-bool",
        "a boolean that is not true/false",
        "train",
        lambda w: w.train("--compile=maybe"),
        2,
        ("'compile'", "true or false"),
    ),
    Case(
        "cli-missing-value",
        "a key with no value",
        "train",
        lambda w: w.train("--n_layer"),
        2,
        ("argument --n_layer: expected one argument", "--help"),
    ),
    Case(
        "size-zero",
        "a zero size",
        "train",
        lambda w: w.train("--n_layer=0"),
        2,
        ("'n_layer' must be a positive integer",),
    ),
    Case(
        "size-negative",
        "a negative size",
        "train",
        lambda w: w.train("--batch_size=-4"),
        2,
        ("'batch_size' must be a positive integer",),
    ),
    Case(
        "block-size-zero",
        "block_size 0",
        "train",
        lambda w: w.train("--block_size=0"),
        2,
        ("'block_size' must be a positive integer",),
    ),
    Case(
        "n-embd-indivisible",
        "n_embd not divisible by n_head",
        "train",
        lambda w: w.train("--n_embd=15"),
        2,
        ("'n_embd' must be a multiple of 'n_head' (2)", "use 16"),
    ),
    Case(
        "unknown-tokenizer",
        "unknown tokenizer",
        "train",
        lambda w: w.train("--tokenizer=bpe"),
        2,
        ("'tokenizer' must be one of char, gpt2",),
    ),
    Case(
        "not-finite",
        "a number that is nan or inf",
        "train",
        lambda w: w.train("--learning_rate=nan"),
        2,
        ("'learning_rate' must be a finite number",),
    ),
    Case(
        "val-fraction",
        "val_fraction outside (0, 1)",
        "train",
        lambda w: w.train("--val_fraction=1.5"),
        2,
        ("'val_fraction' must be between 0 and 1",),
    ),
    Case(
        "seed-out-of-range",
        "a seed no generator accepts",
        "train",
        lambda w: w.train("--seed=99999999999999999999"),
        2,
        ("'seed' must be between 0 and 2**32 - 1",),
    ),
    Case(
        "threads-too-many",
        "more threads than CPUs",
        "train",
        lambda w: w.train("--threads=100000"),
        2,
        ("--threads=100000 but this machine has",),
        exact=False,
    ),
    Case(
        "watch-interval-negative",
        "a negative watch_interval",
        "train",
        lambda w: w.train("--watch_interval=-5"),
        2,
        ("'watch_interval' must be >= 0",),
    ),
    Case(
        "toml-malformed",
        "malformed TOML",
        "train",
        lambda w: w.train(config=w.file("c.toml", "n_layer = 2\nn_head = = 3\n")),
        2,
        ("not valid TOML", "line 2", "fix the syntax"),
    ),
    Case(
        "toml-is-a-text",
        "train.py corpus.txt: a text to train on where the config file goes",
        "train",
        lambda w: w.train(config=str(w.root / "corpus.txt")),
        2,
        ("corpus.txt is not a TOML config file", "--dataset="),
    ),
    Case(
        "toml-float-underflow",
        "learning_rate = 1e-400 in a config file (float() reads it as 0)",
        "train",
        lambda w: w.train(config=w.file("c.toml", "learning_rate = 1e-400\n")),
        2,
        ("1e-400 is too small for a 64-bit float, which reads it as 0",),
    ),
    Case(
        "toml-table",
        "a [table] in the TOML file",
        "train",
        lambda w: w.train(config=w.file("c.toml", "[model]\nn_layer = 2\n")),
        2,
        ("keys are flat",),
    ),
    Case(
        "toml-missing",
        "config file does not exist",
        "train",
        lambda w: w.train(config=str(w.root / "nope.toml")),
        2,
        ("nope.toml not found",),
    ),
    Case(
        "two-configs",
        "two config files",
        "train",
        lambda w: w.train(w.file("other.toml", "")),
        2,
        ("at most one config file",),
    ),
    Case(
        "toml-not-regular",
        "config file is a named pipe (FIFO)",
        "train",
        lambda w: w.train(config=w.fifo("c.toml")),
        2,
        ("not a regular file",),
    ),
    Case(
        "toml-nul-character",
        "a NUL character in a TOML string",
        "train",
        lambda w: w.train(config=w.file("c.toml", 'probes = "a\\u0000b.jsonl"\n')),
        2,
        ("'probes' holds a NUL",),
    ),
    Case(
        "dataset-empty", "an empty dataset name", "train", lambda w: w.train("--dataset="), 2, ("'dataset' is empty",)
    ),
    Case(
        "watch-sentence-empty",
        "an empty watch sentence",
        "train",
        lambda w: w.train('--watch_sentences=["the dog", ""]'),
        2,
        ("non-empty strings",),
    ),
    Case(
        "agreement-missing-field",
        "an agreement context without its other pronoun",
        "train",
        lambda w: w.train(f"--agreement={w.file('agree.jsonl', AGREEMENT_LINE)}"),
        1,
        ("agree.jsonl line 1", "missing field(s) 'wrong'", "text, pronoun, wrong"),
    ),
    Case(
        "device-unknown",
        "a device that does not exist (tpu)",
        "train",
        lambda w: w.train("--device=tpu"),
        2,
        ("'device' must be one of auto, cpu, cuda, mps or cuda:N",),
    ),
    Case(
        "model-too-big",
        "a model too large for memory (n_embd in the millions)",
        "train",
        lambda w: w.train("--n_embd=4000000", "--n_head=1"),
        1,
        ("needs at least", "lower --n_embd (now 4,000,000) or --n_layer"),
        exact=False,
    ),
    Case(
        "batch-too-big",
        "a batch too large for memory (batch_size in the billions)",
        "train",
        lambda w: w.train("--batch_size=10000000000"),
        1,
        ("needs at least", "lower --batch_size (now 10,000,000,000), --block_size"),
        exact=False,
    ),
    Case(
        "run-name-escapes",
        "a run_name that climbs out of log_dir",
        "train",
        lambda w: w.train("--run_name=../../x"),
        2,
        ("'run_name' climbs out of its folder", "inside log_dir"),
    ),
    Case(
        "run-name-absolute",
        "a run_name that is an absolute path",
        "train",
        lambda w: w.train(f"--run_name={w.root / 'elsewhere'}"),
        2,
        ("'run_name' is an absolute path",),
    ),
    Case(
        "run-name-empty-part",
        "a run_name with an empty part",
        "train",
        lambda w: w.train("--run_name=a//b"),
        2,
        ("'run_name' has an empty part",),
    ),
    Case(
        "schedule-min-lr-above-peak",
        "min_lr above learning_rate",
        "train",
        lambda w: w.train("--learning_rate=1e-4", "--min_lr=1e-3"),
        2,
        ("'min_lr' (0.001) is above 'learning_rate' (0.0001)", "--min_lr=1e-05"),
    ),
    Case(
        "toml-nested",
        f"a TOML value of {DEEP:,} nested brackets",
        "train",
        lambda w: w.train(config=w.file("c.toml", "watch_sentences = " + "[" * DEEP)),
        2,
        ("c.toml is not valid TOML", "nested too deeply"),
    ),
    Case(
        "cli-nested-list",
        f"--watch_sentences of {DEEP:,} nested brackets",
        "train",
        lambda w: w.train("--watch_sentences=" + "[" * DEEP),
        2,
        ("'watch_sentences' on the command line is not valid TOML", "nested too deeply", "(100,000 characters)"),
    ),
    Case(
        "cli-list-bad-escape",
        "a --watch_sentences list whose string holds an escape TOML refuses",
        "train",
        lambda w: w.train('--watch_sentences=["\\ud800abc"]'),
        2,
        (
            "is not valid TOML: Escaped character is not a Unicode scalar value (at character 9)",
            "a TOML list of strings",
        ),
    ),
    Case(
        "cli-int-too-long",
        "an integer of 5,000 digits (beyond Python's limit on converting them)",
        "train",
        lambda w: w.train("--seed=" + "1" * 5000),
        2,
        ("'seed' on the command line is a number of 5,000 digits", "(5,000 characters)"),
    ),
    Case(
        "cli-int-other-digits",
        "an integer written with a digit int() refuses (²)",
        "train",
        lambda w: w.train("--n_layer=²"),
        2,
        ("'n_layer' on the command line must be an integer; got '²'",),
    ),
    Case(
        "cli-float-underflow",
        "--learning_rate=1e-400 (float() reads it as 0)",
        "train",
        lambda w: w.train("--learning_rate=1e-400"),
        2,
        ("'learning_rate' on the command line: 1e-400 is too small for a 64-bit float", "reads it as 0"),
    ),
    Case(
        "modern-odd-head-size",
        "--arch=modern with heads of an odd size (16 wide, 16 heads)",
        "train",
        lambda w: w.train("--arch=modern", "--n_head=16"),
        2,
        ("'n_head' must leave each head an even number of features for arch 'modern'", "gives 1", "use n_head=8"),
    ),
    Case(
        "relative-positions-modern",
        "--relative_positions with --arch=modern (which has rotary positions)",
        "train",
        lambda w: w.train("--arch=modern", "--relative_positions=true"),
        2,
        ("'relative_positions' is an option of arch gpt2", "rotary", "modern without"),
    ),
    Case(
        "block-size-too-large",
        "a block_size of a billion",
        "train",
        lambda w: w.train("--block_size=1000000000"),
        2,
        ("'block_size' must be at most 16,777,216",),
    ),
    Case(
        "env-world-size-not-a-number",
        "WORLD_SIZE=² in the environment",
        "train",
        lambda w: w.train(),
        2,
        ("WORLD_SIZE='²' is not a whole number", "unset it"),
        patch=lambda mp: mp.setenv("WORLD_SIZE", "²"),
    ),
    Case(
        "env-rank-outside-world",
        "RANK=5 in the environment, without WORLD_SIZE",
        "train",
        lambda w: w.train(),
        2,
        ("RANK=5", "of WORLD_SIZE=1, which no launcher sets"),
        patch=lambda mp: mp.setenv("RANK", "5"),
    ),
    Case(
        "out-dir-not-utf8",
        "an out_dir whose name holds a byte that is not UTF-8",
        "train",
        lambda w: w.train(f"--out_dir={w.root / NOT_UTF8}"),
        2,
        ("'out_dir'", "caf\\xe9' holds the byte \\xe9, which is not UTF-8", "rename"),
    ),
    Case(
        "dataset-not-utf8",
        "a dataset file whose name holds a byte that is not UTF-8",
        "train",
        lambda w: w.train(f"--dataset={w.file(NOT_UTF8 + '.txt', TEXT)}"),
        2,
        ("'dataset'", "not UTF-8"),
    ),
    Case(
        "run-name-not-utf8",
        "a run_name holding a byte that is not UTF-8",
        "train",
        lambda w: w.train(f"--run_name={NOT_UTF8}"),
        2,
        ("'run_name'", "not UTF-8"),
    ),
    Case(
        "toml-name-not-utf8",
        "a config file whose name holds a byte that is not UTF-8",
        "train",
        lambda w: w.train(config=w.file(NOT_UTF8 + ".toml", "")),
        2,
        ("config file name", "not UTF-8"),
    ),
    # --- checkpoints (train --resume) -----------------------------------------------------------------------
    Case(
        "resume-missing",
        "--resume without a checkpoint",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.root / 'empty'}"),
        1,
        ("--resume but there is no checkpoint", "drop --resume"),
    ),
    Case(
        "resume-init-from-missing",
        "--init_from=resume (nanoGPT's word for --resume) without a checkpoint",
        "train",
        lambda w: w.train("--init_from=resume", f"--out_dir={w.root / 'empty'}"),
        1,
        ("init_from is 'resume' but there is no checkpoint", "set init_from to scratch"),
    ),
    Case(
        "resume-init-from-missing-toml",
        'init_from = "resume" in a config file, without a checkpoint',
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'empty'}", config=w.file("r.toml", 'init_from = "resume"\n')),
        1,
        ("init_from is 'resume' but there is no checkpoint", "set init_from to scratch"),
    ),
    Case(
        "resume-init-from-and-resume-false",
        "--init_from=resume --resume=false",
        "train",
        lambda w: w.train("--init_from=resume", "--resume=false"),
        2,
        ("'init_from' is 'resume'", "'resume' is false", "drop one of the two"),
    ),
    Case(
        "resume-truncated",
        "--resume from a truncated checkpoint",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('cut', _truncate)}"),
        1,
        ("not a readable checkpoint", "truncated"),
    ),
    Case(
        "resume-not-checkpoint",
        "--resume from a file that is not a checkpoint",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('junk', _random_bytes)}"),
        1,
        ("not a checkpoint written by this trainer",),
    ),
    Case(
        "resume-plain-tensor",
        "--resume from a torch file holding a plain tensor",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('tensor', _plain_tensor)}"),
        1,
        ("not a checkpoint written by this trainer",),
    ),
    Case(
        "resume-pickled-object",
        "--resume from a checkpoint with a pickled object",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('pickled', _pickled)}"),
        1,
        ("refusing", "pickled Python object (argparse.Namespace)"),
    ),
    Case(
        "resume-other-version",
        "--resume from another checkpoint format version",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('v99', _other_version)}"),
        1,
        ("format version 99",),
    ),
    Case(
        "resume-no-model-config",
        "--resume from a checkpoint without model_config",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('noconf', _no_model_config)}"),
        1,
        ("not a usable checkpoint", "'model_config' is missing"),
    ),
    Case(
        "resume-config-disagrees",
        "--resume from a checkpoint whose model_config and weights disagree",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('wide', _wider_config)}"),
        1,
        ("weights do not fit its model_config", "expected (28, 32), found (28, 16)"),
    ),
    Case(
        "resume-no-optimizer",
        "--resume from a checkpoint without optimizer state",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('noopt', _no_optimizer)}"),
        1,
        ("'optimizer', which resuming needs, is missing",),
    ),
    Case(
        "resume-optimizer-mismatch",
        "--resume from optimizer state of another model",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('moments', _other_moments)}"),
        1,
        ("optimizer or random-generator state does not fit", "'exp_avg'"),
    ),
    Case(
        "resume-larger-block",
        "--resume with a block_size beyond the checkpoint's",
        "train",
        lambda w: w.train("--resume", "--block_size=64"),
        2,
        ("block_size is 64 (the checkpoint's: 32", "--block_size=32"),
    ),
    Case(
        "resume-other-model",
        "--resume with another model shape",
        "train",
        lambda w: w.train("--resume", "--n_layer=2"),
        2,
        ("n_layer is 2 (the checkpoint's: 1)", "--n_layer=1"),
    ),
    Case(
        "resume-other-attn-only",
        "--resume --attn_only from a checkpoint without it (so trained with MLPs)",
        "train",
        lambda w: w.train("--resume", "--attn_only=true"),
        2,
        ("attn_only is True (the checkpoint's: False)", "--attn_only=false"),
    ),
    Case(
        "resume-other-optimizer",
        "--resume with another optimizer",
        "train",
        lambda w: w.train("--resume", "--optimizer=muon"),
        2,
        ("optimizer is 'muon' (the checkpoint's: 'adamw')", "--optimizer=adamw"),
    ),
    Case(
        "resume-other-vocabulary",
        "--resume with another tokenizer",
        "train",
        lambda w: w.train("--resume", "--tokenizer=gpt2"),
        2,
        ("the vocabulary of this data, gpt2", "char of 28 tokens", "/corpus.txt --tokenizer=char"),
        exact=False,  # the text the checkpoint recorded is in the folder its run trained in
    ),
    *[
        Case(
            f"resume-nanogpt-checkpoint{'-init-from' if how == '--init_from=resume' else ''}",
            f"{how} from an intact nanoGPT checkpoint",
            "train",
            lambda w, how=how: w.train(how, f"--out_dir={w.checkpoint('nano', _nanogpt)}"),
            1,
            ("holds a nanoGPT model", "continues only a run gptwatch's train.py saved", "--init_from="),
        )
        for how in ("--resume", "--init_from=resume")
    ],
    Case(
        "resume-many-differences",
        "--resume with another shape, block and tokenizer at once",
        "train",
        lambda w: w.train("--resume", "--n_layer=2", "--n_head=4", "--block_size=64", "--tokenizer=gpt2"),
        2,
        (
            "4 settings differ",
            "n_layer is 2 (the checkpoint's: 1)",
            "n_head is 4 (the checkpoint's: 2)",
            "block_size is 64 (the checkpoint's: 32",
            "the vocabulary of this data, gpt2",
            "/corpus.txt --tokenizer=char",
            "--block_size=32 --n_layer=1 --n_head=2",
        ),
        exact=False,  # the text the checkpoint recorded is in the folder its run trained in
    ),
    Case(
        "resume-other-seed",
        "--resume with another seed than the one the starting model was drawn with",
        "train",
        lambda w: w.train("--resume", "--seed=7"),
        2,
        ("seed is 7 (the checkpoint's: 1337", "untrained baselines", "--seed=1337"),
    ),
    Case(
        "resume-other-text",
        "--resume on another text with the same characters",
        "train",
        lambda w: w.train(
            "--resume",
            f"--out_dir={w.checkpoint('here', _trained_here)}",
            f"--dataset={w.file('other.txt', OTHER_TEXT)}",
        ),
        2,
        (
            "other.txt is not the text the checkpoint was trained on",
            "--dataset=",
            "corpus.txt, sha256 be3d41fa7511",
            "start a new --out_dir",
        ),
    ),
    Case(
        "resume-other-val-fraction",
        "--resume with another val_fraction",
        "train",
        lambda w: w.train("--resume", "--val_fraction=0.2"),
        2,
        ("val_fraction is 0.2 (the checkpoint's: 0.1", "--val_fraction=0.1"),
    ),
    Case(
        "resume-nan-weight",
        "--resume from a checkpoint holding nan weights",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('nan', _nan_weight)}"),
        1,
        ("holds numbers that are not finite", "model.wte.weight holds 3 nan values"),
    ),
    Case(
        "resume-inf-optimizer-state",
        "--resume from a checkpoint whose optimizer state holds inf",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('inf', _inf_optimizer_state)}"),
        1,
        ("holds numbers that are not finite", "exp_avg holds 1 inf value"),
    ),
    Case(
        "resume-seed-out-of-range",
        "--resume from a checkpoint whose train_config seed is 2**70",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('seed', _huge_seed)}"),
        1,
        ("its train_config is invalid", "'seed' must be between 0 and 2**32 - 1; got 1180591620717411303424"),
    ),
    Case(
        "resume-run-name-escapes",
        "--resume from a checkpoint whose run name climbs out of log_dir",
        "train",
        lambda w: w.train("--resume", "--run_name=", f"--out_dir={w.checkpoint('esc', _run_name_escapes)}"),
        1,
        ("'../../escaped'", "outside --log_dir", "--run_name=NAME"),
    ),
    # --- fine-tuning (train --init_from): the model decides the model keys and the tokenizer ----------------------
    Case(
        "finetune-init-from-empty",
        "an empty init_from",
        "train",
        lambda w: w.train("--init_from="),
        2,
        ("'init_from' is empty",),
    ),
    Case(
        "finetune-unknown-model",
        "an init_from that is neither a path nor a hub model",
        "train",
        lambda w: w.train("--init_from=gpt3"),
        1,
        ("gpt3 is neither", "pass a local folder"),
    ),
    Case(
        "finetune-model-key",
        "a model key that disagrees with the model fine-tuned",
        "train",
        lambda w: w.train(f"--init_from={w.out}", "--n_layer=2", f"--out_dir={w.root / 'ft'}"),
        2,
        ("config key 'n_layer' is 2 but the model", "has 1", "leave n_layer out"),
    ),
    Case(
        "finetune-into-its-source",
        "a fine-tune whose out_dir is the folder of the model it reads",
        "train",
        lambda w: w.train(f"--init_from={w.out}", f"--out_dir={w.out}"),
        2,
        ("is the folder the model to fine-tune is read from", "choose another --out_dir"),
    ),
    Case(
        "finetune-into-its-source-file",
        "the same, the model given as its ckpt.pt",
        "train",
        lambda w: w.train(f"--init_from={w.out / 'ckpt.pt'}", f"--out_dir={w.out}"),
        2,
        ("is the folder the model to fine-tune is read from",),
    ),
    Case(
        "finetune-tokenizer",
        "a tokenizer that disagrees with the model fine-tuned",
        "train",
        lambda w: w.train(f"--init_from={w.out}", "--tokenizer=gpt2", f"--out_dir={w.root / 'ft'}"),
        2,
        ("config key 'tokenizer' is 'gpt2'", "its own char vocabulary of 28 tokens"),
    ),
    Case(
        "finetune-block-size",
        "a block_size above the positions of the model fine-tuned",
        "train",
        lambda w: w.train(f"--init_from={w.out}", "--block_size=64", f"--out_dir={w.root / 'ft'}"),
        2,
        ("block_size=64 is above the 32 positions", "--block_size=32 or less"),
    ),
    Case(
        "finetune-unseen-characters",
        "a text with characters the char model fine-tuned never had",
        "train",
        lambda w: w.train(
            f"--init_from={w.out}", f"--dataset={w.file('upper.txt', TEXT + 'THE END')}", f"--out_dir={w.root / 'ft'}"
        ),
        1,
        ("5 character(s) that the model", "never had: 'D', 'E', 'H', 'N', 'T'", "remove them from the text"),
    ),
    Case(
        "finetune-resume-other-model",
        "--resume naming another init_from than the checkpoint's",
        "train",
        lambda w: w.train("--resume", f"--init_from={w.root / 'gpt2'}"),
        2,
        ("config key 'init_from' is", "started from 'scratch'", "--init_from=scratch"),
    ),
    Case(
        "finetune-too-big",
        "a fine-tune too large for memory (free memory made tiny)",
        "train",
        lambda w: w.train(f"--init_from={w.out}", f"--out_dir={w.root / 'ft'}"),
        1,
        ("needs at least", "are loaded already", "lower --batch_size (now 4) or --block_size (now 32)"),
        patch=lambda mp: mp.setattr("model.memory.available_memory", lambda device: 100_000),
    ),
    # --- sampling -----------------------------------------------------------------------------------------------
    Case("sample-empty-prompt", "empty prompt", "sample", lambda w: w.sample("--prompt="), 2, ("prompt is empty",)),
    Case(
        "sample-unknown-chars",
        "prompt characters outside the vocabulary",
        "sample",
        lambda w: w.sample("--prompt=THE DOG"),
        1,
        ("not in the char vocabulary", "'D', 'E', 'G'"),
    ),
    Case(
        "sample-unknown-tokens",
        "prompt tokens outside the vocabulary (gpt2)",
        "sample",
        lambda w: w.sample("--prompt=the xylophone", out=w.root / "gpt2"),
        1,
        ("never seen in the training corpus", "'ophone'"),
    ),
    Case(
        "sample-zero-tokens",
        "--max_new_tokens=0",
        "sample",
        lambda w: w.sample("--max_new_tokens=0"),
        2,
        ("--max_new_tokens must be a positive integer; got",),
    ),
    Case(
        "sample-negative-tokens",
        "--max_new_tokens negative",
        "sample",
        lambda w: w.sample("--max_new_tokens=-5"),
        2,
        ("--max_new_tokens must be a positive integer; got",),
    ),
    Case(
        "sample-negative-temperature",
        "negative temperature",
        "sample",
        lambda w: w.sample("--temperature=-1"),
        2,
        ("--temperature must be a number >= 0",),
    ),
    Case(
        "sample-nan-temperature",
        "temperature nan",
        "sample",
        lambda w: w.sample("--temperature=nan"),
        2,
        ("--temperature must be a number >= 0",),
    ),
    Case(
        "sample-top-k-zero",
        "--top_k=0",
        "sample",
        lambda w: w.sample("--top_k=0"),
        2,
        ("--top_k must be between 1 and the vocabulary size",),
    ),
    Case(
        "sample-top-k-too-big",
        "--top_k larger than the vocabulary",
        "sample",
        lambda w: w.sample("--top_k=1000"),
        2,
        ("--top_k must be between 1 and the vocabulary size",),
    ),
    Case(
        "sample-top-p-zero", "--top_p=0", "sample", lambda w: w.sample("--top_p=0"), 2, ("--top_p must be in (0, 1]",)
    ),
    Case(
        "sample-top-p-big",
        "--top_p above 1",
        "sample",
        lambda w: w.sample("--top_p=1.5"),
        2,
        ("--top_p must be in (0, 1]",),
    ),
    Case(
        "sample-top-p-underflow",
        "--top_p=1e-400 (float() reads it as 0)",
        "sample",
        lambda w: w.sample("--top_p=1e-400"),
        2,
        ("--top_p: 1e-400 is too small for a 64-bit float, which reads it as 0",),
    ),
    Case(
        "sample-temperature-not-a-number",
        "--temperature=warm",
        "sample",
        lambda w: w.sample("--temperature=warm"),
        2,
        ("--temperature must be a number; got 'warm'",),
    ),
    Case(
        "sample-seed-out-of-range",
        "a seed no generator accepts",
        "sample",
        lambda w: w.sample("--seed=-1"),
        2,
        ("--seed must be between 0 and 2**32 - 1; got -1",),
    ),
    Case(
        "sample-prompt-file-missing",
        "missing prompt file",
        "sample",
        lambda w: w.sample(f"--prompt=@{w.root / 'prompt.txt'}"),
        2,
        ("prompt file", "not found"),
    ),
    Case(
        "sample-unknown-flag",
        "unknown flag",
        "sample",
        lambda w: w.sample("--topk=3"),
        2,
        ("unrecognized arguments: --topk=3", "--help"),
    ),
    Case(
        "sample-wrong-type",
        "a flag value of the wrong type",
        "sample",
        lambda w: w.sample("--max_new_tokens=ten"),
        2,
        ("invalid int value: 'ten'",),
    ),
    Case(
        "sample-no-checkpoint",
        "no checkpoint in --out_dir",
        "sample",
        lambda w: w.sample(out=w.root / "nothing"),
        1,
        ("checkpoint", "not found"),
    ),
    Case(
        "sample-truncated",
        "truncated checkpoint",
        "sample",
        lambda w: w.sample(out=w.checkpoint("cut", _truncate)),
        1,
        ("not a readable checkpoint",),
    ),
    Case(
        "sample-pickled-object",
        "checkpoint with a pickled object",
        "sample",
        lambda w: w.sample(out=w.checkpoint("pickled", _pickled)),
        1,
        ("refusing", "pickled Python object"),
    ),
    Case(
        "sample-no-model-config",
        "checkpoint without model_config",
        "sample",
        lambda w: w.sample(out=w.checkpoint("noconf", _no_model_config)),
        1,
        ("'model_config' is missing",),
    ),
    Case(
        "sample-config-disagrees",
        "checkpoint whose model_config and weights disagree",
        "sample",
        lambda w: w.sample(out=w.checkpoint("wide", _wider_config)),
        1,
        ("weights do not fit its model_config",),
    ),
    Case(
        "sample-broken-tokenizer",
        "checkpoint whose tokenizer is not one",
        "sample",
        lambda w: w.sample(out=w.checkpoint("tok", _broken_tokenizer)),
        1,
        ("holds no usable tokenizer",),
    ),
    Case(
        "sample-checkpoint-directory",
        "a folder named ckpt.pt",
        "sample",
        lambda w: w.sample(out=(w.root / "dir" / "ckpt.pt").mkdir(parents=True) or w.root / "dir"),
        1,
        ("checkpoint", "is a directory"),
    ),
    Case(
        "sample-nan-weight",
        "checkpoint holding nan weights",
        "sample",
        lambda w: w.sample(out=w.checkpoint("nan", _nan_weight)),
        1,
        ("holds numbers that are not finite", "model.wte.weight holds 3 nan values"),
    ),
    Case(
        "sample-nan-weight-page",
        "checkpoint holding nan weights, for --attention --html",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", "--html=page.html", out=w.checkpoint("nan", _nan_weight)),
        1,
        ("holds numbers that are not finite",),
    ),
    Case(
        "sample-odd-head-size",
        "a modern checkpoint edited to heads of an odd size",
        "sample",
        lambda w: w.sample(out=w.checkpoint("odd", _odd_head_size)),
        1,
        ("its model_config is invalid", "'n_head' must leave each head an even number of features"),
    ),
    Case(
        "sample-block-size-beyond-bound",
        "a modern checkpoint claiming block_size 10**9 (rotary tables)",
        "sample",
        lambda w: w.sample(out=w.checkpoint("long", _billion_positions)),
        1,
        ("its model_config is invalid", "'block_size' must be at most 16,777,216"),
    ),
    Case(
        "sample-model-exceeds-memory",
        "a modern checkpoint claiming block_size 2**20, with 64 MiB free",
        "sample",
        lambda w: w.sample(out=w.checkpoint("long", _million_positions)),
        1,
        ("block_size 1,048,576", "needs at least", "rotary tables 32.0 MiB", "64.0 MiB is free"),
        patch=_little_memory,
    ),
    Case(
        "sample-checkpoint-seed-out-of-range",
        "--heads on a checkpoint whose train_config seed is 2**70",
        "sample",
        lambda w: w.sample("--heads", out=w.checkpoint("seed", _huge_seed)),
        1,
        ("its train_config is invalid", "'seed' must be between 0 and 2**32 - 1"),
    ),
    Case(
        "sample-checkpoint-nul-data-dir",
        "a checkpoint whose train_config data_dir holds a NUL",
        "sample",
        lambda w: w.sample("--heads", out=w.checkpoint("nul", _nul_in_data_dir)),
        1,
        ("its train_config is invalid", "'data_dir' holds a NUL character"),
    ),
    Case(
        "sample-checkpoint-step-too-large",
        "a checkpoint whose step is 2**70",
        "sample",
        lambda w: w.sample(out=w.checkpoint("step", _huge_step)),
        1,
        ("'step' is not a step count",),
    ),
    Case(
        "sample-out-dir-not-utf8",
        "an --out_dir whose name holds a byte that is not UTF-8",
        "sample",
        lambda w: w.sample(out=w.root / NOT_UTF8),
        2,
        ("--out_dir", "not UTF-8"),
    ),
    Case(
        "sample-tiktoken-cache-damaged",
        "a damaged GPT-2 BPE file in TIKTOKEN_CACHE_DIR",
        "sample",
        lambda w: w.sample(out=w.root / "gpt2"),
        1,
        ("tiktoken cache holds a damaged copy", "TIKTOKEN_CACHE_DIR"),
        setup=_damaged_tiktoken_cache,
    ),
    Case(
        "sample-device-unknown",
        "a device that does not exist (tpu)",
        "sample",
        lambda w: w.sample("--device=tpu"),
        2,
        ("unknown device 'tpu'",),
    ),
    Case(
        "sample-device-meta",
        "torch's shape-only device (meta)",
        "sample",
        lambda w: w.sample("--device=meta"),
        2,
        ("unknown device 'meta'",),
    ),
    Case(
        "sample-device-absent",
        "a GPU this machine does not have (cuda:99)",
        "sample",
        lambda w: w.sample("--device=cuda:99"),
        2,
        ("--device=cuda:99 but",),
        exact=False,
    ),
    Case(
        "sample-two-looks",
        "--attention and --probes together",
        "sample",
        lambda w: w.sample("--attention=the dog", f"--probes={w.probes(LONG_PROBE)}"),
        2,
        ("give one of them per command",),
    ),
    Case(
        "sample-option-ignored",
        "a sampling option with --probes",
        "sample",
        lambda w: w.sample(f"--probes={w.probes(LONG_PROBE)}", "--temperature=0.5"),
        2,
        ("--temperature applies to sampling text, which --probes does not do",),
    ),
    Case(
        "sample-query-other-digits",
        "--query ² (a digit to str.isdigit, not to int)",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", "--query=²"),
        2,
        ("--query '²' is not a token of the text",),
    ),
    Case(
        "sample-query-too-long",
        "--query of 5,000 digits",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", "--query=" + "9" * 5000),
        2,
        ("(5,000 characters) is outside the 14 tokens",),
    ),
    Case(
        "sample-ablate-too-long",
        "--ablate L0H followed by 5,000 digits",
        "sample",
        lambda w: w.sample("--ablate=L0H" + "1" * 5000),
        2,
        ("bad head name", "a number of 5,000 digits", "expected L<layer>H<head>"),
    ),
    Case(
        "sample-prompt-file-control-characters",
        "a prompt file whose name holds ESC [2J (clear screen)",
        "sample",
        lambda w: w.sample("--prompt=@" + str(w.root / "p\x1b[2J.txt")),
        2,
        ("p\\x1b[2J.txt not found",),
    ),
    Case(
        "sample-query-alone",
        "--query without --attention",
        "sample",
        lambda w: w.sample("--query=dog"),
        2,
        ("--query applies only to --attention",),
    ),
    Case(
        "sample-html-alone",
        "--html without --attention",
        "sample",
        lambda w: w.sample("--html=page.html"),
        2,
        ("--html needs --attention TEXT",),
    ),
    Case(
        "sample-html-and-png-dir",
        "--html with --png_dir",
        "sample",
        lambda w: w.sample("--attention=the dog and it", "--html=page.html", "--png_dir=png"),
        2,
        ("--png_dir is where --attention writes PNGs, which --html replaces",),
    ),
    Case(
        "sample-text-alone",
        "--text without --heads",
        "sample",
        lambda w: w.sample(f"--text={w.file('t.txt', 'the dog')}"),
        2,
        ("--text applies only to --heads",),
    ),
    Case(
        "sample-heads-and-probes",
        "--heads with --probes",
        "sample",
        lambda w: w.sample("--heads", f"--probes={w.probes(SHORT_PROBE)}"),
        2,
        ("two different looks", "give one of them"),
    ),
    Case(
        "sample-mean-ablation-without-text",
        "--heads --ablation=mean where there is no held-out text",
        "sample",
        lambda w: w.sample("--heads", "--ablation=mean", "--ablate=L0H0", out=w.checkpoint("gone", _data_gone)),
        2,
        ("--ablation=mean", "give --text FILE", "--ablation=zero"),
    ),
    Case(
        "sample-mean-ablation-short-text",
        "--heads --ablation=mean with a --text of one character",
        "sample",
        lambda w: w.sample("--heads", "--ablation=mean", f"--text={w.file('one.txt', 'a')}"),
        2,
        ("one.txt has 1 tokens, too few for held-out text scores", "a longer --text FILE"),
    ),
    Case(
        "sample-mean-ablation-block-1",
        "--heads --ablation=mean on a model of block_size 1",
        "sample",
        lambda w: w.sample("--heads", "--ablation=mean", "--ablate=L0H0", out=w.checkpoint("b1", _block_1)),
        2,
        ("block_size 1 is below 16, too short for windows of held-out text", "use --ablation=zero"),
    ),
    Case(
        "sample-heads-text-missing",
        "--heads --text of a missing file",
        "sample",
        lambda w: w.sample("--heads", f"--text={w.root / 'nowhere.txt'}"),
        1,
        ("text file", "not found"),
    ),
    Case(
        "sample-heads-text-outside-vocabulary",
        "--heads --text with characters the model never saw",
        "sample",
        lambda w: w.sample("--heads", f"--text={w.file('t.txt', 'ZZZ QQQ')}"),
        1,
        ("--text", "not in the char vocabulary"),
    ),
    Case(
        "cli-bad-ablation",
        "an unknown ablation mode",
        "train",
        lambda w: w.train("--ablation=half"),
        2,
        ("'ablation' must be one of zero, mean",),
    ),
    Case(
        "sample-json-alone",
        "--json in plain sampling",
        "sample",
        lambda w: w.sample("--json"),
        2,
        ("--json applies only to --attention, --probes, --heads and --patch",),
    ),
    # --- sample.py --patch -------------------------------------------------------------------------------------
    Case(
        "sample-patch-unequal-lengths",
        "--patch prompts of different token lengths",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it", "the dog saw"),
        1,
        ("the clean prompt has 14 tokens and the corrupted one 11", "as many tokens"),
    ),
    Case(
        "sample-patch-answer-not-one-token",
        "--answer of two tokens",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it", "the log saw it", "--answer", "ab"),
        1,
        ("--answer 'ab' is 2 tokens", "a single token"),
    ),
    Case(
        "sample-patch-same-answer",
        "--answer and --wrong the same token",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it", "the log saw it", "--answer", "a", "--wrong", "a"),
        1,
        ("the right and the wrong answer are the same token 'a'",),
    ),
    Case(
        "sample-patch-same-prompts",
        "--patch with the clean prompt as the corrupted one",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it", "the dog saw it", "--answer", "a", "--wrong", "e"),
        1,
        ("the clean and the corrupted prompt are the same tokens", "change the word the answer depends on"),
    ),
    Case(
        "sample-patch-no-difference",
        "--patch with a pair the model does not tell apart",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it", "the log saw it", "--answer", "a", "--wrong", "e"),
        1,
        ("after the clean prompt and", "not a difference of at least 0.01 logits", "choose prompts"),
    ),
    Case(
        "sample-patch-answer-outside-vocabulary",
        "--answer of a character the model never saw",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it", "the log saw it", "--answer", "\u00e9"),
        1,
        ("--answer '\u00e9':",),
    ),
    Case(
        "sample-patch-pairs-same-answer",
        "a pairs file whose line gives the same token as both answers",
        "sample",
        lambda w: w.sample(
            "--patch",
            w.file(
                "pairs.jsonl",
                '{"clean": "the dog saw it", "corrupted": "the log saw it", "answer": "a", "wrong": "a"}\n',
            ),
        ),
        1,
        ("pairs.jsonl line 1: the right and the wrong answer are the same token 'a'", 'its "answer" and its "wrong"'),
    ),
    Case(
        "sample-patch-too-many",
        "--patch with three prompts",
        "sample",
        lambda w: w.sample("--patch", "a", "b", "c"),
        2,
        ("--patch takes two prompts (CLEAN CORRUPTED) or one JSONL file of pairs, got 3",),
    ),
    Case(
        "sample-patch-one-prompt",
        "--patch with one prompt that is not a file",
        "sample",
        lambda w: w.sample("--patch", "the dog saw it"),
        2,
        ("--patch 'the dog saw it' is one prompt and no file", "--patch CLEAN CORRUPTED"),
    ),
    Case(
        "sample-paths-alone",
        "--paths without --patch",
        "sample",
        lambda w: w.sample("--paths"),
        2,
        ("--paths applies only to --patch",),
    ),
    Case(
        "sample-answer-alone",
        "--answer without --patch",
        "sample",
        lambda w: w.sample("--answer", "a"),
        2,
        ("--answer applies only to --patch",),
    ),
    Case(
        "sample-patch-pairs-bad-line",
        "a pairs file whose line lacks its corrupted prompt",
        "sample",
        lambda w: w.sample("--patch", w.file("pairs.jsonl", '{"clean": "the dog saw it"}\n')),
        1,
        ("pairs.jsonl line 1: missing field(s) 'corrupted'",),
    ),
    # --- sample.py --init_from: a model trained elsewhere ----------------------------------------------------
    Case(
        "sample-out-dir-and-init-from",
        "--out_dir and --init_from together",
        "sample",
        lambda w: w.sample("--init_from=gpt2"),
        2,
        ("--out_dir and --init_from both name the model", "one of them"),
    ),
    Case(
        "sample-init-from-unknown",
        "--init_from a name that is neither a path nor a hub model",
        "sample",
        lambda w: ["--init_from=gpt3", "--device=cpu"],
        1,
        ("gpt3 is neither", "gpt2-xl", "pass a local folder"),
    ),
    Case(
        "sample-init-from-offline",
        "--init_from a hub name, the hub unreachable and nothing cached",
        "sample",
        lambda w: ["--init_from=gpt2", "--device=cpu"],
        1,
        ("cannot fetch gpt2", "pass a local folder"),
        setup=_hub_offline,
        exact=False,
    ),
    # --- sample.py --export -----------------------------------------------------------------------------------
    Case(
        "export-unknown-target",
        "an export target that is not tl or hf",
        "sample",
        lambda w: w.sample("--export", "onnx", "model.onnx"),
        2,
        ("--export onnx: unknown target", "tl", "hf"),
    ),
    Case(
        "export-path-missing",
        "--export with a target and no path",
        "sample",
        lambda w: w.sample("--export", "tl"),
        2,
        ("--export: expected 2 arguments",),
    ),
    Case(
        "export-option-ignored",
        "a sampling option with --export",
        "sample",
        lambda w: w.sample("--export", "tl", "m.pt", "--temperature=0"),
        2,
        ("--temperature applies to sampling text, which --export does not do",),
    ),
    Case(
        "export-ablate",
        "--ablate with --export",
        "sample",
        lambda w: w.sample("--export", "tl", "m.pt", "--ablate=L0H0"),
        2,
        ("--ablate does not apply to --export",),
    ),
    Case(
        "export-and-look",
        "--export with --attention",
        "sample",
        lambda w: w.sample("--attention=the dog", "--export", "tl", "m.pt"),
        2,
        ("two different things to do with a checkpoint", "give one of them per command"),
    ),
    Case(
        "export-tl-directory",
        "--export tl into an existing folder",
        "sample",
        lambda w: w.sample("--export", "tl", str(w.root)),
        1,
        ("is a directory", "give a file path"),
    ),
    Case(
        "export-tl-overwrite",
        "--export tl over a file that is not an export (the checkpoint)",
        "sample",
        lambda w: w.sample("--export", "tl", str(w.out / "ckpt.pt")),
        1,
        ("exists and is not an --export tl file written earlier", "remove it or choose another path"),
    ),
    Case(
        "export-unwritable",
        "--export tl under a regular file",
        "sample",
        lambda w: w.sample("--export", "tl", f"{w.file('a-file', 'x')}/m.pt"),
        1,
        ("cannot write", "choose a writable path"),
    ),
    Case(
        "export-hf-not-empty",
        "--export hf into a folder holding other files",
        "sample",
        lambda w: w.sample("--export", "hf", str(Path(w.file("mine/notes.txt", "mine")).parent)),
        1,
        ("not empty and holds no earlier export", "choose a new or empty folder"),
    ),
    Case(
        "export-hf-file",
        "--export hf onto a file",
        "sample",
        lambda w: w.sample("--export", "hf", w.file("a-file", "x")),
        1,
        ("is a file", "writes a folder"),
    ),
    Case(
        "export-hf-modern-bias",
        "--export hf of a modern model with biases (no exact standard class)",
        "sample",
        lambda w: w.sample("--export", "hf", str(w.root / "hf"), out=w.checkpoint("modern", _modern_bias)),
        1,
        (
            "cannot export this model to Hugging Face exactly",
            "Qwen3ForCausalLM",
            "(c_fc, c_proj)",
            "(out_proj)",
            "--export tl FILE",
        ),
    ),
    Case(
        "export-tl-relative-positions",
        "--export tl of a model with relative positions (TransformerLens has none)",
        "sample",
        lambda w: w.sample("--export", "tl", str(w.root / "m.pt"), out=w.checkpoint("rel", _relative)),
        1,
        (
            "cannot export this model to TransformerLens exactly",
            "relative_positions=true",
            "ALiBi",
            "--relative_positions=false",
        ),
    ),
    Case(
        "export-hf-relative-positions",
        "--export hf of a model with relative positions (no standard class has them)",
        "sample",
        lambda w: w.sample("--export", "hf", str(w.root / "hf"), out=w.checkpoint("rel", _relative)),
        1,
        (
            "cannot export this model to Hugging Face exactly",
            "relative_positions=true",
            "Qwen3's rotary",
            "--relative_positions=false",
        ),
    ),
    Case(
        "export-tl-folder-path",
        "--export tl to a path with a trailing / (a folder that does not exist)",
        "sample",
        lambda w: w.sample("--export", "tl", f"{w.root / 'newdir'}/"),
        1,
        ("newdir/ names a folder (it ends in /), not a file for --export tl", "newdir/model.tl.pt"),
    ),
    Case(
        "export-hf-root",
        "--export hf / (a path without a name)",
        "sample",
        lambda w: w.sample("--export", "hf", "/"),
        1,
        ("/ is the root of the filesystem",),
    ),
    Case(
        "html-folder-path",
        "--html to a path with a trailing /",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", f"--html={w.root / 'pages'}/"),
        1,
        ("pages/ names a folder (it ends in /), not a file for --html",),
    ),
    Case(
        "export-tl-disk-full",
        "disk full while writing --export tl (simulated: its writes fail halfway)",
        "sample",
        lambda w: w.sample("--export", "tl", str(w.root / "m.tl.pt")),
        1,
        ("cannot write the TransformerLens file", "No space left on device on the disk mounted at", "free disk space"),
        patch=_export_disk_full,
        exact=False,
    ),
    Case(
        "export-tl-not-installed",
        "--export tl without transformer-lens installed",
        "sample",
        lambda w: w.sample("--export", "tl", str(w.root / "m.pt")),
        1,
        ("needs transformer-lens, which is not installed", "pip install -r requirements-interop.txt"),
        patch=_without("transformer_lens"),
    ),
    Case(
        "export-hf-not-installed",
        "--export hf without transformers installed",
        "sample",
        lambda w: w.sample("--export", "hf", str(w.root / "hf")),
        1,
        ("needs transformers, which is not installed", "pip install -r requirements-interop.txt"),
        patch=_without("transformers"),
    ),
    Case(
        "sample-prompt-not-regular",
        "prompt file is a named pipe (FIFO)",
        "sample",
        lambda w: w.sample(f"--prompt=@{w.fifo('prompt.txt')}"),
        2,
        ("not a regular file",),
    ),
    Case(
        "sample-probes-not-regular",
        "probe file is a named pipe (FIFO)",
        "sample",
        lambda w: w.sample(f"--probes={w.fifo('probes.jsonl')}"),
        1,
        ("not a regular file",),
    ),
    Case(
        "sample-probe-too-long",
        "a probe longer than block_size",
        "sample",
        lambda w: w.sample(f"--probes={w.probes(SHORT_PROBE, LONG_PROBE)}"),
        1,
        ("probes.jsonl line 2", "58 tokens, more than the model's block_size 32", "shorten its text"),
    ),
    Case(
        "sample-probe-nested",
        f"a probe line of {DEEP:,} nested brackets",
        "sample",
        lambda w: w.sample(f"--probes={w.file('probes.jsonl', '[' * DEEP)}"),
        1,
        ("probes.jsonl line 1: not valid JSON", "nested too deeply"),
    ),
    Case(
        "probes-duplicate-key",
        "a probe line that gives one key twice (JSON readers keep either value)",
        "sample",
        lambda w: w.sample(f"--probes={w.file('probes.jsonl', TEXT_TWICE)}"),
        1,
        ("probes.jsonl line 1", "the key 'text' is given twice"),
    ),
    Case(
        "sample-probe-same-word",
        "a probe whose referent is its distractor",
        "sample",
        lambda w: w.sample(f"--probes={w.probes({**LONG_PROBE, 'distractor': 'ball'})}"),
        1,
        ("probes.jsonl line 1", "same word as the referent"),
    ),
    Case(
        "sample-probe-unknown-characters",
        "a probe with characters outside the vocabulary",
        "sample",
        lambda w: w.sample(f"--probes={w.probes({**LONG_PROBE, 'text': 'The dog saw the ball and it rolled'})}"),
        1,
        ("probes.jsonl line 1", "'T'"),
    ),
    # --- files ---------------------------------------------------------------------------------------------------
    Case(
        "out-dir-unwritable",
        "out_dir under a regular file",
        "train",
        lambda w: w.train(f"--out_dir={w.file('a-file', 'x')}/out"),
        1,
        ("cannot write to out_dir", "choose a writable --out_dir"),
    ),
    Case(
        "log-dir-unwritable",
        "log_dir under a regular file",
        "train",
        lambda w: w.train(f"--log_dir={w.file('a-file', 'x')}/runs"),
        1,
        ("cannot write to log_dir", "choose a writable --log_dir"),
    ),
    Case(
        "data-dir-unwritable",
        "data_dir under a regular file",
        "train",
        lambda w: w.train(f"--data_dir={w.file('a-file', 'x')}/prep"),
        1,
        ("cannot write prepared data", "a-file is a file, not a folder", "--data_dir"),
    ),
    Case(
        "disk-full",
        "disk full while saving a checkpoint (simulated: its writes fail halfway)",
        "train",
        lambda w: w.train(),
        1,
        ("No space left on device on the disk mounted at", "previous checkpoint is intact", "free disk space"),
        patch=_disk_full,
        exact=False,
    ),
    Case(
        "startup-interrupted-train",
        "Ctrl-C while train.py starts (torch is being imported)",
        "train",
        lambda w: w.train(),
        130,
        ("interrupted while starting", "nothing was written"),
        env=_torch_interrupted,
    ),
    Case(
        "startup-interrupted-sample",
        "Ctrl-C while sample.py starts (torch is being imported)",
        "sample",
        lambda w: w.sample(),
        130,
        ("interrupted while starting", "nothing was written"),
        env=_torch_interrupted,
    ),
    Case(
        "startup-interrupt-caught-by-a-library",
        "Ctrl-C while sample.py starts, inside an import that catches it (numpy's then fails a second import)",
        "sample",
        lambda w: w.sample(),
        130,
        ("interrupted while starting", "nothing was written"),
        env=lambda w: _torch_interrupted(w, caught=True),
    ),
    Case(
        "sample-interrupted",
        "Ctrl-C while sample.py samples, which writes nothing",
        "sample",
        lambda w: w.sample(),
        130,
        ("interrupted",),
        patch=lambda mp: mp.setattr("sample.stream_samples", _interrupt),
    ),
    Case(
        "checkpoint-path-directory",
        "a folder where out_dir/ckpt.pt should be",
        "train",
        lambda w: w.train(f"--out_dir={(w.root / 'dir' / 'ckpt.pt').mkdir(parents=True) or w.root / 'dir'}"),
        1,
        ("ckpt.pt is a directory", "move it away or choose another --out_dir"),
    ),
    Case(
        "out-dir-in-use",
        "another training run holds out_dir",
        "train",
        lambda w: w.train(),
        1,
        ("in use by another training run", "pid 4242 on other-host", "wait for it"),
        setup=_another_run_holds_out,
    ),
    Case(
        "run-name-in-use",
        "another training run logs to the same log_dir/run_name",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        1,
        ("the TensorBoard run", "in use by another training run", "pid 4242 on other-host", "--run_name"),
        setup=_another_run_logs_to_the_run_name,
    ),
    Case(
        "out-dir-lock-link",
        "a symbolic link where out_dir's lock goes",
        "train",
        lambda w: w.train(),
        1,
        ("is a symbolic link, where the run lock goes", "never followed or replaced", "move it away"),
        setup=_link_as_the_lock,
    ),
    Case(
        "out-dir-lock-users-file",
        "a file of the user's named .lock in out_dir (not a run lock train.py wrote)",
        "train",
        lambda w: w.train(),
        1,
        (".lock exists and is not a gptwatch run lock", "left as it is", "choose another --out_dir"),
        setup=_users_file_as_the_lock,
    ),
    Case(
        "checkpoint-prev-directory",
        "a folder where the earlier run's ckpt.prev.pt goes",
        "train",
        lambda w: w.train(f"--out_dir={(w.out / 'ckpt.prev.pt').mkdir() or w.out}"),
        1,
        ("ckpt.prev.pt is a directory", "earlier run's checkpoint", "move it away"),
    ),
    Case(
        "png-dir-unwritable",
        "--png_dir under a regular file",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", f"--png_dir={w.file('a-file', 'x')}/png"),
        1,
        ("cannot write the heatmaps", "choose a writable --png_dir"),
    ),
    Case(
        "html-unwritable",
        "--html under a regular file",
        "sample",
        lambda w: w.sample("--attention=the dog and it", f"--html={w.file('a-file', 'x')}/page.html"),
        1,
        ("cannot write the attention page", "a-file/page.html", "choose a writable path"),
    ),
    # --- outputs: a file replaces only one the tool wrote there earlier (files.Mark) ----------------------------
    Case(
        "html-over-a-checkpoint",
        "--html naming the checkpoint itself",
        "sample",
        lambda w: w.sample("--attention=the dog saw the ball and it", f"--html={w.out / 'ckpt.pt'}"),
        1,
        ("ckpt.pt exists and is not an attention page", "left as it is", "gptwatch replaces only files it wrote"),
    ),
    Case(
        "prev-checkpoint-over-a-users-file",
        "a new run into an out_dir whose ckpt.prev.pt is a user's file (it would keep the earlier run there)",
        "train",
        lambda w: (w.file("out/ckpt.prev.pt", "my notes\n"), w.train())[1],
        1,
        ("ckpt.prev.pt exists and is not a gptwatch checkpoint", "choose another --out_dir"),
    ),
    Case(
        "png-over-a-file-of-the-same-name",
        "--attention into a --png_dir holding a user's file under a heatmap's name",
        "sample",
        lambda w: (
            w.file(f"png/{sentence_slug('the dog saw it')}_layer0.png", "my own notes\n"),
            w.sample("--attention=the dog saw it", f"--png_dir={w.root / 'png'}"),
        )[1],
        1,
        ("_layer0.png exists and is not a gptwatch heatmap", "choose another --png_dir"),
    ),
    Case(
        "html-over-project-source",
        "--html naming a copy of the project's watch/show/page.py, which holds the page's header (not first)",
        "sample",
        lambda w: w.sample(
            "--attention=the dog saw it", f"--html={w.file('page.py', (ROOT / 'watch/show/page.py').read_text())}"
        ),
        1,
        ("page.py exists and is not an attention page", "left as it is", "gptwatch replaces only files it wrote"),
    ),
    Case(
        "prev-checkpoint-over-a-note-naming-the-format",
        "a new run into an out_dir whose ckpt.prev.pt is a user's note that names the checkpoint format",
        "train",
        lambda w: (w.file("out/ckpt.prev.pt", "my notes on the gptwatch-checkpoint format\n"), w.train())[1],
        1,
        ("ckpt.prev.pt exists and is not a gptwatch checkpoint", "left as it is"),
    ),
    Case(
        "prev-checkpoint-link",
        "a new run into an out_dir whose ckpt.prev.pt is a symbolic link",
        "train",
        lambda w: w.train(),
        1,
        ("ckpt.prev.pt is a symbolic link", "earlier run's checkpoint", "never followed or replaced"),
        setup=_link_named("out/ckpt.prev.pt"),
    ),
    Case(
        "html-link",
        "--html naming a symbolic link",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", f"--html={w.root / 'page.html'}"),
        1,
        ("page.html is a symbolic link, where an attention page goes", "never followed or replaced"),
        setup=_link_named("page.html"),
    ),
    Case(
        "png-link",
        "--attention into a --png_dir holding a symbolic link under a heatmap's name",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", f"--png_dir={w.root / 'png'}"),
        1,
        ("_layer0.png is a symbolic link, where a gptwatch heatmap goes", "choose another --png_dir"),
        setup=_link_named(f"png/{sentence_slug('the dog saw it')}_layer0.png"),
    ),
    Case(
        "lock-disk-full",
        "disk full where the run lock is written (simulated: writing it fails)",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        1,
        ("cannot write the run lock", "No space left on device on the disk mounted at", "free disk space"),
        patch=_lock_disk_full,
        exact=False,
    ),
    # --- reading: a bound on what is read, and nothing that blocks ------------------------------------------------
    Case(
        "probes-too-many",
        "--probes file of 10,001 probes (reading each costs a tokenization)",
        "sample",
        lambda w: w.sample(f"--probes={w.probes(*[SHORT_PROBE] * 10_001)}"),
        1,
        ("holds 10,001 probes", "more than the 10,000 gptwatch reads", "head -n 10000"),
    ),
    Case(
        "patch-pairs-too-many",
        "--patch file of 10,001 pairs (each pair patches the model head by head: about a second)",
        "sample",
        lambda w: w.sample(
            "--patch",
            w.file(
                "pairs.jsonl", (json.dumps({"clean": "the dog saw it", "corrupted": "the log saw it"}) + "\n") * 10_001
            ),
        ),
        1,
        ("holds 10,001 pairs", "about a second", "10,000 take hours", "head -n 300"),
    ),
    Case(
        "tiktoken-cache-fifo",
        "a named pipe where the tiktoken cache's GPT-2 BPE file should be",
        "sample",
        lambda w: w.sample(out=w.root / "gpt2"),
        1,
        ("the tiktoken cache's", "is not a regular file", "move that away"),
        setup=lambda w: _fifo_tiktoken_cache(w),
    ),
    # --- TensorBoard runs: a new run never joins another's lines (runtime.check_run_folder) ------------------------
    Case(
        "tensorboard-run-holds-another-run",
        "--run_name of a TensorBoard run another training logged to",
        "train",
        lambda w: (w.file("runs/t/events.out.tfevents.1700000000.host.1.0", b"\x00"), w.train())[1],
        1,
        ("holds another run's logs", "choose another --run_name"),
    ),
    Case(
        "tensorboard-run-inside-another-run",
        "--run_name inside another run's per-head folder (exp/L0H0)",
        "train",
        lambda w: (w.file("runs/exp/events.out.tfevents.1700000000.host.1.0", b"\x00"), w.train("--run_name=exp/L0H0"))[
            1
        ],
        1,
        ("lies inside", "the folder of another run", "choose a --run_name outside it"),
    ),
    # --- path settings: one check (files.path_setting) for every path either command takes ---------------------
    *[
        Case(
            f"path-empty-{key.replace('_', '-')}",
            f"an empty --{key} (an unset shell variable)",
            "train",
            lambda w, key=key: w.train(f"--{key}="),
            2,
            (f"config key '{key}' is an empty path", "unset shell variable"),
        )
        for key in ("out_dir", "log_dir", "data_dir")
    ],
    Case(
        "path-empty-in-config",
        "out_dir = '' in a config file",
        "train",
        lambda w: [w.file("empty-out.toml", 'out_dir = ""\n'), "--device=cpu"],
        2,
        ("config key 'out_dir' is an empty path",),
    ),
    Case(
        "path-home-of-no-user",
        "--out_dir=~nosuchuser/gw: a home folder that does not exist",
        "train",
        lambda w: w.train("--out_dir=~nosuchuser46/gw"),
        2,
        ("starts with '~nosuchuser46'", "no such user", "./~nosuchuser46/gw"),
    ),
    *[
        Case(
            f"path-part-too-long-{key.replace('_', '-')}",
            f"--{key} with a part over 255 bytes",
            "train",
            lambda w, key=key: w.train(f"--{key}={w.root / ('x' * 300)}"),
            2,
            (f"config key '{key}' has a part of 300 bytes", "255 bytes"),
        )
        for key in ("out_dir", "dataset", "log_dir", "init_from", "data_dir")
    ],
    Case(
        "path-part-too-long-run-name",
        "--run_name of 300 bytes",
        "train",
        lambda w: w.train("--run_name=" + "é" * 150),
        2,
        ("config key 'run_name' has a part of 300 bytes",),
    ),
    *[
        Case(
            f"sample-path-empty-{key.replace('_', '-')}",
            f"sample.py --{key}= (an unset shell variable)",
            "sample",
            lambda w, key=key: w.sample("--attention=the dog saw it", f"--{key}="),
            2,
            (f"--{key} is an empty path",),
        )
        for key in ("out_dir", "png_dir", "html")
    ],
    Case(
        "sample-path-empty-export",
        "sample.py --export tl '' (an unset shell variable)",
        "sample",
        lambda w: w.sample("--export", "tl", ""),
        2,
        ("--export tl is an empty path",),
    ),
    *[
        Case(
            f"sample-path-part-too-long-{key.replace('_', '-')}",
            f"sample.py --{key} with a part over 255 bytes",
            "sample",
            lambda w, key=key: w.sample(
                "--heads" if key == "text" else "--attention=the dog saw it", f"--{key}={w.root / ('y' * 256)}"
            ),
            2,
            (f"--{key} has a part of 256 bytes",),
        )
        for key in ("out_dir", "init_from", "png_dir", "html", "text")
    ],
    # --- training ---------------------------------------------------------------------------------------------
    Case(
        "diverged",
        "loss becomes nan or inf (--learning_rate=1e6)",
        "train",
        lambda w: w.train("--learning_rate=1e6"),
        1,
        ("at step", "training stopped", "try a lower --learning_rate (now 1e+06)"),
        exact=False,
    ),
    Case(
        "diverged-weight-decay",
        "a weight decay that removes whole weights (--weight_decay=1e6)",
        "train",
        lambda w: w.train("--weight_decay=1e6"),
        1,
        ("training stopped", "try a lower --weight_decay (now 1e+06)"),
        exact=False,
    ),
    # --- warnings: the command goes on, and says what it did -------------------------------------------
    Case(
        "warn-earlier-run-kept",
        "a new run into an out_dir holding a checkpoint",
        "train",
        lambda w: w.train(),
        0,
        ("held an earlier run", "kept it as"),
        may_change=("out/ckpt.pt",),
    ),
    Case(
        "warn-interrupted-start-keeps-earlier-runs",
        "Ctrl-C right after a new run's first step, into an out_dir holding two earlier runs (ckpt.pt, ckpt.prev.pt)",
        "train",
        lambda w: w.train(),
        130,
        ("stopped at step 1, before this run's first checkpoint", "not saved", "ckpt.prev.pt stay as they were"),
        patch=_ctrl_c_at_the_first_step,
        setup=_two_earlier_runs,
        warning=True,
    ),
    Case(
        "warn-stale-lock",
        "a run lock left by a killed run",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        0,
        ("pid 999999999", "taking it over"),
        setup=_lock_left_by_a_killed_run,
        may_change=("new/.lock",),
    ),
    Case(
        "warn-run-folder-replaced",
        "--run_name of a TensorBoard run whose training stopped before it saved a checkpoint",
        "train",
        lambda w: (
            w.file("runs/t/events.out.tfevents.1700000000.host.1.0", b"\x00"),
            w.file("runs/t/.gptwatch-run", '{"run": "0123456789abcdef", "saved": false}'),
            w.train(f"--out_dir={w.root / 'new'}"),
        )[2],
        0,
        ("stopped before it saved a checkpoint", "this run's logs replace them"),
        may_change=("runs/t/*",),
    ),
    Case(
        "warn-damaged-cache",
        "prepared data damaged on disk (train.bin cut short)",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        0,
        ("train.bin has 3 bytes", "rebuilding it"),
        setup=_damaged_cache,
        may_change=("prep/*/*",),
    ),
    Case(
        "warn-sample-prompt",
        "a sample_prompt outside the vocabulary",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}", "--sample_prompt=THE DOG", "--sample_tokens=5"),
        0,
        ("no text sample will be logged", "'D', 'E'"),
    ),
    Case(
        "warn-log-dir-full",
        "disk full under log_dir (simulated in TensorBoard's writer thread)",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        0,
        ("cannot write TensorBoard logs", "No space left on device", "going on without them"),
        patch=_log_dir_full,
    ),
    Case(
        "warn-stale-lock-nested",
        f"a run lock left by a killed run, holding {DEEP:,} nested brackets",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        0,
        ("pid unknown", "taking it over"),
        setup=_nested_lock_left_by_a_killed_run,
        may_change=("new/.lock",),
    ),
    Case(
        "warn-damaged-cache-nested",
        f"a prepared meta.json of {DEEP:,} nested brackets",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}"),
        0,
        ("meta.json is not valid JSON", "nested too deeply", "rebuilding it"),
        setup=_nested_cache_meta,
        may_change=("prep/*/*",),
    ),
    Case(
        "warn-warmup-longer-than-run",
        "a warm-up longer than the run",
        "train",
        lambda w: w.train(f"--out_dir={w.root / 'new'}", "--warmup_iters=100"),
        0,
        ("warms up over --warmup_iters=100 steps but the run ends at step 6", "never reaches"),
    ),
    Case(
        "warn-resume-old-checkpoint",
        "--resume from a checkpoint that does not record its data",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('old', _no_data_record)}"),
        0,
        ("does not record which text it was trained on",),
        may_change=("old/ckpt.pt",),
    ),
    Case(
        "warn-sample-default-prompt",
        "no --prompt, for a model that never saw a newline",
        "sample",
        lambda w: w.sample(out=w.checkpoint("nonl", _no_newline)),
        0,
        ("no --prompt given", "never saw a newline", "starting from ' '"),
    ),
    Case(
        "warn-before-fine-tuning-gone",
        "--resume of a fine-tune whose model is gone (no second baseline)",
        "train",
        lambda w: w.train("--resume", f"--out_dir={w.checkpoint('ft', _fine_tuned_from_gone)}"),
        0,
        ("the model before fine-tuning", "cannot be read again", "shown without it"),
        may_change=("ft/ckpt.pt",),
    ),
    Case(
        "warn-probes-indistinct-continuations",
        "--probes whose two nouns' continuations begin with the same character (char model: barked, bowled)",
        "sample",
        lambda w: w.sample(f"--probes={w.probes({**BARKED_BOWLED})}"),
        0,
        ("1 of 1 probes", "begin with the same tokens for both nouns", "not measurable"),
    ),
    Case(
        "warn-attention-run-name-escapes",
        "--attention with a checkpoint whose run name climbs out",
        "sample",
        lambda w: w.sample("--attention=the dog saw it", out=w.checkpoint("esc", _run_name_escapes)),
        0,
        ("not added to TensorBoard", "'../../escaped'", "they are in the PNG files"),
    ),
]
SUBPROCESS = ("cli-unknown-key", "sample-top-p-big")  # the same, through a real process


def run_case(case: Case, root: Path, trained: Trained, subprocess_: bool = False) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the case run in `root`, checking that existing files are untouched
    (a warning's `may_change` files excepted)."""
    ws = Workspace(root, trained)
    args = case.args(ws)
    env = case.env(ws) if case.env else None
    with contextlib.ExitStack() as stack:
        if case.setup:
            stack.enter_context(case.setup(ws))
        may_change = {p for pattern in case.may_change for p in root.glob(pattern)}
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p not in may_change}
        with pytest.MonkeyPatch.context() as mp:
            if case.patch:
                case.patch(mp)
            code, out, err = run(case.program, args, subprocess_=subprocess_, env=env)
        changed = [str(p) for p, data in before.items() if not p.is_file() or p.read_bytes() != data]
    assert not changed, f"{case.id} changed existing files: {changed}"
    return code, out, err


def one_message(err: str, kind: str) -> str:
    """stderr of the case: exactly one line, 'error: ...' or 'warning: ...', no traceback."""
    assert err.startswith(f"{kind}: ") and err.endswith("\n") and err.count("\n") == 1, err
    return err


def shown(err: str, root: Path) -> str:
    """The message as docs/errors.md shows it: without 'error: ' or 'warning: ', the temporary folder as TMP."""
    return re.sub(r"^(error|warning): ", "", err).rstrip("\n").replace(str(root), "TMP")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_one_clear_line(case, trained, tmp_path):
    code, _, err = run_case(case, tmp_path, trained)
    message = one_message(err, case.kind)
    assert code == case.code, message
    for word in case.words:
        assert word in message, f"{word!r} missing from: {message}"
    documented = doc_rows(case.kind).get(case.id)
    assert documented is not None and (documented == shown(err, tmp_path) or not case.exact), (
        f"docs/errors.md is out of date for {case.id}; run: python tests/test_bad_input.py --write"
    )


@pytest.mark.parametrize("case_id", SUBPROCESS)
def test_real_process_prints_one_line_and_exits(case_id, trained, tmp_path):
    case = next(c for c in CASES if c.id == case_id)
    code, _, err = run_case(case, tmp_path, trained, subprocess_=True)
    assert code == case.code and "Traceback" not in err
    assert shown(one_message(err, case.kind), tmp_path) == doc_rows(case.kind)[case.id]


def test_debug_lets_the_exception_and_its_traceback_through(tmp_path):
    import sample
    import train
    from common.cli import run_cli
    from common.errors import UsageError, UserError

    with pytest.raises(UsageError, match="'n_layer' must be a positive integer"):
        run_cli(train.main, [*tiny_args(tmp_path, "--n_layer=0"), "--debug"])
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café ".encode("latin-1") * 50)
    with pytest.raises(UserError, match="not UTF-8"):
        run_cli(train.main, [*tiny_args(tmp_path, f"--dataset={latin1}"), "--debug"])
    with pytest.raises(UserError, match="checkpoint .* not found"):
        run_cli(sample.main, ["--debug", f"--out_dir={tmp_path / 'nothing'}"])


def test_every_case_is_documented():
    for kind in SECTIONS:
        assert sorted(doc_rows(kind)) == sorted(c.id for c in CASES if c.kind == kind)


def test_the_catalogue_counts_the_cases():
    errors = sum(c.kind == "error" for c in CASES)
    warnings = sum(c.kind == "warning" for c in CASES)
    assert f"{errors} bad inputs and {warnings} warnings" in DOC.read_text(encoding="utf-8")


# --- docs/errors.md ---------------------------------------------------------------------------------------


def doc_rows(kind: str = "error") -> dict[str, str]:
    """{case id: message} from the table of errors (or of warnings) in docs/errors.md."""
    start, end = SECTIONS[kind]
    rows = {}
    for line in DOC.read_text(encoding="utf-8").split(start)[1].split(end)[0].splitlines():
        match = re.match(r"\| `([\w-]+)` \|.*\| `` (.*) `` \|$", line)
        if match:
            rows[match[1]] = match[2].replace("\\|", "|")
    return rows


def doc_tables() -> dict[str, str]:
    """Runs every case and returns, for errors and for warnings, the markdown table of what it printed."""
    lines = {
        kind: [
            f"| case | {'bad input' if kind == 'error' else 'input'} | program | exit | message (stderr, "
            f"after `{kind}: `) |",
            "|---|---|---|---|---|",
        ]
        for kind in SECTIONS
    }
    with tempfile.TemporaryDirectory() as tmp:
        trained = train_tiny_checkpoints(Path(tmp) / "trained")
        for case in CASES:
            root = Path(tmp) / case.id
            root.mkdir()
            code, _, err = run_case(case, root, trained)
            assert code == case.code and err.count("\n") == 1, (case.id, err)
            message = shown(err, root).replace("|", "\\|")
            lines[case.kind].append(f"| `{case.id}` | {case.problem} | {case.program}.py | {code} | `` {message} `` |")
    return {kind: "\n".join(rows) for kind, rows in lines.items()}


def write_docs(tables: dict[str, str]) -> None:
    text = DOC.read_text(encoding="utf-8")
    for kind, (start, end) in SECTIONS.items():
        head, rest = text.split(start)
        text = f"{head}{start}\n{tables[kind]}\n{end}{rest.split(end)[1]}"
    counts = (sum(c.kind == "error" for c in CASES), sum(c.kind == "warning" for c in CASES))
    text = re.sub(r"\d+ bad inputs and \d+ warnings", f"{counts[0]} bad inputs and {counts[1]} warnings", text)
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    os.chdir(ROOT)
    tables = doc_tables()
    if "--write" in sys.argv:
        write_docs(tables)
        print(f"updated {DOC}")
    else:
        print("\n\n".join(tables.values()))
