"""Nothing lost, nothing trusted blindly: atomic checkpoints, safe loading,
exact resume, stopping on a signal, and stopping when the loss diverges."""

import contextlib
import dataclasses
import errno
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import Trained

from bench.harness import load_config
from common.errors import UserError
from data.batches import Batches
from formats import checkpoint as ckpt_mod
from formats.checkpoint import FORMAT, FORMAT_VERSION, CheckpointError, load_checkpoint, save_checkpoint
from model import GPT
from tests.commands import PATIENCE, ROOT, TEXT, one_line, python, run, run_train, tiny_args
from trainer import optim, runtime
from trainer.start import starting_from
from trainer.trainer import CheckpointWriter, FitResult, Trainer

SCHEDULE = ["--warmup_iters=1", "--lr_decay_iters=6"]  # the same learning rates however the run is split


def fit(tmp_path: Path, *extra: str) -> FitResult:
    """A tiny run through the Trainer itself (train.py's run, without its printing)."""
    argv = tiny_args(tmp_path, *extra)
    cfg = load_config(argv[0], argv[1:])
    rt = runtime.setup(cfg)
    return Trainer.from_start(starting_from(cfg).prepared(), rt).fit()


def evaluations(*results: FitResult) -> dict[int, tuple[float, float]]:
    """{step: (train loss, val loss)} over one or several runs."""
    return {e.step: (e.train_loss, e.val_loss) for result in results for e in result.evaluations}


def same_tensors(a: dict, b: dict) -> bool:
    """Deep equality of nested dicts/lists holding tensors, bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_tensors(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# --- saving: atomic, and a failed save changes nothing ------------------------------------------


def _checkpoint(step: int) -> dict:
    return {"step": step, "weights": torch.full((64, 64), float(step))}


def _full_disk_after_some_bytes(obj, fh, *args, **kwargs):
    fh.write(b"PK\x03\x04 half a checkpoint")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _failing_rename(src, dst):
    raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.mark.parametrize(
    "target,replacement,reason",
    [
        ("torch.save", _full_disk_after_some_bytes, "No space left on device"),
        ("os.replace", _failing_rename, "Input/output error"),
    ],
    ids=["disk-full-mid-write", "rename-fails"],
)
def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch, target, replacement, reason):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, _checkpoint(1))
    before = path.read_bytes()
    module, name = target.split(".")
    monkeypatch.setattr(getattr(ckpt_mod, module), name, replacement)
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(path, _checkpoint(2))
    message = str(info.value)
    assert "\n" not in message and reason in message and "previous checkpoint is intact" in message
    assert "--out_dir" in message
    monkeypatch.undo()
    assert path.read_bytes() == before and load_checkpoint(path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no temp file left


def test_interrupt_during_save_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, _checkpoint(1))

    def interrupted(obj, fh, *args, **kwargs):
        fh.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt_mod.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, _checkpoint(2))
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1 and [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


# --- loading: only what this trainer wrote ------------------------------------------------------


@dataclasses.dataclass
class Settings:
    lr: float = 0.1


class Sneaky:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _write_bad(kind: str, path: Path, good: bytes) -> None:
    header = {"format": FORMAT, "format_version": FORMAT_VERSION}
    if kind == "dataclass":
        torch.save({**header, "settings": Settings()}, path)
    elif kind == "code":
        torch.save({**header, "model": Sneaky(path.parent / "code-ran")}, path)
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "text":
        path.write_text("step = 3\nthis is a config, not a checkpoint\n")
    elif kind == "tensor":
        torch.save(torch.zeros(3), path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "version":
        torch.save({**torch.load(_good(path.parent), weights_only=True), "format_version": 99}, path)


def _good(folder: Path) -> Path:
    good = folder / "good.pt"
    if not good.exists():
        save_checkpoint(good, _checkpoint(5))
    return good


@pytest.mark.parametrize(
    "kind,words",
    [
        ("dataclass", ["refusing", "pickled Python object", "Settings"]),
        ("code", ["refusing", "pickled Python object (io.open)"]),
        ("truncated", ["not a readable checkpoint", "truncated"]),
        ("random", ["not a checkpoint written by this trainer"]),
        ("text", ["not a checkpoint written by this trainer"]),
        ("tensor", ["not a checkpoint written by this trainer"]),
        ("empty", ["is empty"]),
        ("version", ["format version 99", "reads version 1"]),
    ],
)
def test_untrusted_or_broken_checkpoints_are_refused_clearly(tmp_path, kind, words):
    path = tmp_path / "ckpt.pt"
    _write_bad(kind, path, _good(tmp_path).read_bytes())
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    for word in words:
        assert word in message, message
    assert not (tmp_path / "code-ran").exists()


def test_missing_checkpoint_says_where_it_looked(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint .*ckpt.pt not found; point --out_dir at the folder"):
        load_checkpoint(tmp_path)


# --- resume: bit-identical to a run that never stopped -------------------------------------------


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_equals_straight_run(tmp_path, optimizer):
    """N steps straight == N/2 steps, then --resume for N/2 more: same losses, identical parameters."""
    straight = tmp_path / "straight"
    split = tmp_path / "split"
    common = [*SCHEDULE, f"--optimizer={optimizer}"]
    whole = fit(tmp_path, *common, f"--out_dir={straight}")
    first = fit(tmp_path, *common, f"--out_dir={split}", "--max_iters=3")
    second = fit(tmp_path, *common, f"--out_dir={split}", "--resume")

    a, b = torch.load(straight / "ckpt.pt", weights_only=True), torch.load(split / "ckpt.pt", weights_only=True)
    assert a["step"] == b["step"] == 6
    assert same_tensors(a["model"], b["model"])
    assert same_tensors(a["optimizer"], b["optimizer"])
    assert same_tensors(a["rng"], b["rng"])
    assert a["best_val_loss"] == b["best_val_loss"]
    assert evaluations(whole) == evaluations(first, second)  # the same floats, not just the same digits
    assert sorted(evaluations(second)) == [6]  # step 3 was evaluated before the first half saved


def test_ctrl_c_saves_and_resume_equals_straight_run(tmp_path, monkeypatch):
    """Ctrl-C during step 2 finishes it, saves step 3 before its evaluation, stops; resuming
    evaluates step 3 and ends exactly where an uninterrupted run ends."""
    straight = tmp_path / "straight"
    whole = fit(tmp_path, *SCHEDULE, f"--out_dir={straight}")

    draws = {"n": 0}
    original = Batches.train

    def train_batch(self):
        draws["n"] += 1
        if draws["n"] == 3:  # inside step 2 (steps count from 0)
            os.kill(os.getpid(), signal.SIGINT)
        return original(self)

    monkeypatch.setattr(Batches, "train", train_batch)
    stopped = tmp_path / "stopped"
    first = fit(tmp_path, *SCHEDULE, f"--out_dir={stopped}")
    monkeypatch.undo()
    assert (first.stopped_by, first.step) == (signal.SIGINT, 3)
    assert torch.load(stopped / "ckpt.pt", weights_only=True)["step"] == 3

    second = fit(tmp_path, *SCHEDULE, f"--out_dir={stopped}", "--resume")
    a, b = torch.load(straight / "ckpt.pt", weights_only=True), torch.load(stopped / "ckpt.pt", weights_only=True)
    assert same_tensors(a["model"], b["model"]) and same_tensors(a["optimizer"], b["optimizer"])
    assert sorted(evaluations(first)) == [0] and sorted(evaluations(second)) == [3, 6]
    assert evaluations(whole) == evaluations(first, second)


def test_ctrl_c_prints_the_command_that_resumes(tmp_path, monkeypatch):
    original = Batches.train

    def train_batch(self):
        os.kill(os.getpid(), signal.SIGINT)
        return original(self)

    monkeypatch.setattr(Batches, "train", train_batch)
    args = tiny_args(tmp_path)
    code, out, err = run_train(args)
    assert code == 128 + signal.SIGINT and err == ""
    hint = re.search(r"SIGINT: saved step 1 to (\S+); resume with: (.*)$", out, re.M)
    assert hint and Path(hint[1]) == tmp_path / "out" / "ckpt.pt"
    assert shlex.split(hint[2]) == ["python", "train.py", *args, "--resume"]


def test_second_ctrl_c_stops_at_once(trained, tmp_path, monkeypatch):
    trained.copy_to(tmp_path / "out")
    before = (tmp_path / "out" / "ckpt.pt").read_bytes()
    original = Batches.train

    def train_batch(self):
        os.kill(os.getpid(), signal.SIGINT)  # the first asks for a stop after this step, the second insists
        os.kill(os.getpid(), signal.SIGINT)
        return original(self)

    monkeypatch.setattr(Batches, "train", train_batch)
    code, _, err = run_train(tiny_args(tmp_path, "--resume"))
    assert code == 130 and "interrupted" in one_line(err)
    assert (tmp_path / "out" / "ckpt.pt").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ckpt.pt"]


def test_resume_with_a_shorter_block_size_trains_on(tmp_path):
    assert run_train(tiny_args(tmp_path, "--max_iters=3"))[0] == 0
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--block_size=8"))
    assert (code, err) == (0, "")
    checkpoint = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert checkpoint["step"] == 6 and checkpoint["model_config"]["block_size"] == 32


# --- signals and kill -9, in a real process --------------------------------------------------------


@contextlib.contextmanager
def _running(args: list[str], *, read_lines: bool = True):
    """train.py ARGS in a process started as from a terminal (`commands.python`), whose stdout lines arrive in
    `proc.lines` while it runs (with `read_lines`; else the test reads stdout itself). Killed on the way out if it
    is still running, whatever the test's outcome."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        python("train.py", *args), cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.lines = []
    if read_lines:
        proc.reader = threading.Thread(target=lambda: proc.lines.extend(proc.stdout), daemon=True)
        proc.reader.start()
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _finish(proc: subprocess.Popen) -> str:
    """Waits for the process and its stdout reader; returns its stderr."""
    proc.wait(timeout=PATIENCE)
    proc.reader.join(timeout=PATIENCE)
    return proc.stderr.read()


def _wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = PATIENCE) -> None:
    """Waits until `condition()` holds: the state the test needs, however slow the machine; fails if the process
    ends first or is still not there after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"train.py never got to {what} (exit {proc.wait()}): {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)


def test_restarts_stopped_right_after_their_first_step_never_push_the_trained_run_out(trained, tmp_path):
    """out/ holds a trained run. Three new runs into it, each stopped (Ctrl-C, SIGTERM, SIGHUP) as soon as it
    prints its first step, before any checkpoint of its own: the first is saved, keeping the trained run as
    ckpt.prev.pt; the others are not, since that would push the trained run out. Each says in one line what was
    kept where."""
    out = tmp_path / "out"
    trained.copy_to(out)
    trained_run = (out / "ckpt.pt").read_bytes()
    first_restart = None
    for seed, signum in ((11, signal.SIGINT), (12, signal.SIGTERM), (13, signal.SIGHUP)):
        args = tiny_args(
            tmp_path, "--max_iters=1000000", "--eval_interval=1000000", f"--seed={seed}", f"--run_name=r{seed}"
        )
        with _running(args) as proc:
            _wait_for(_said(proc, "step 0:"), proc, "its first step")
            proc.send_signal(signum)
            err = _finish(proc)
            lines = proc.lines
        assert proc.returncode == 128 + signum and err.count("\n") == 1, err
        assert (out / "ckpt.prev.pt").read_bytes() == trained_run
        if first_restart is None:
            assert f"held an earlier run (this one has no --resume); kept it as {out / 'ckpt.prev.pt'}" in err
            first_restart = (out / "ckpt.pt").read_bytes()
            assert first_restart != trained_run and load_checkpoint(out)["step"] >= 1
        else:
            assert "before this run's first checkpoint: not saved, so that the earlier runs'" in err, err
            assert (out / "ckpt.pt").read_bytes() == first_restart and "saved step" not in "".join(lines)
            # A run not saved keeps no claim on its TensorBoard folder: the same --run_name starts again.
            assert json.loads((tmp_path / "runs" / f"r{seed}" / ".gptwatch-run").read_text())["saved"] is False
    code, _, err = run_train(tiny_args(tmp_path, "--max_iters=2", "--seed=13", "--run_name=r13"))
    assert code == 0, err  # the last one, not saved, keeps no claim on its name: it starts again


def _said(proc: subprocess.Popen, start: str) -> Callable[[], bool]:
    """Whether the process has printed a line that starts with `start`."""
    return lambda: any(line.startswith(start) for line in proc.lines)


def test_sigterm_finishes_the_step_saves_and_exits_143(tmp_path):
    args = tiny_args(tmp_path, "--max_iters=1000000", "--eval_interval=1000000")
    with _running(args) as proc:
        # Its first evaluation: training has taken the signals over, so the step under way finishes and is saved.
        _wait_for(_said(proc, "step 0:"), proc, "training")
        proc.send_signal(signal.SIGTERM)
        err = _finish(proc)
    out = "".join(proc.lines)
    assert proc.returncode == 128 + signal.SIGTERM == 143, err
    assert err == ""
    hint = re.search(r"SIGTERM: saved step (\d+) to .*; resume with: python train.py .* --resume$", out, re.M)
    assert hint, out[-2000:]
    step = int(hint[1])
    assert step > 0 and load_checkpoint(tmp_path / "out")["step"] == step

    # The printed command resumes (here for two more steps).
    code, _, err = run_train([*args, "--resume", f"--max_iters={step + 2}"])
    assert (code, err) == (0, "") and load_checkpoint(tmp_path / "out")["step"] == step + 2


def test_kill_9_loses_at_most_ckpt_interval_steps(tmp_path):
    args = tiny_args(tmp_path, "--max_iters=1000000", "--eval_interval=1000000", "--ckpt_interval=2")
    checkpoint_file = tmp_path / "out" / "ckpt.pt"
    with _running(args) as proc:
        # Its estimate comes after the first steps timed: a dozen checkpoints written, and one due every other step.
        _wait_for(_said(proc, "about "), proc, "saving a checkpoint every other step")
        proc.kill()
        _finish(proc)
    checkpoint = load_checkpoint(checkpoint_file)  # complete, whatever moment the kill came
    assert checkpoint["step"] > 0 and checkpoint["step"] % 2 == 0
    # The killed run's lock file is left behind but held by nobody: the next run takes it over and says so.
    code, _, err = run_train([*args, "--resume", f"--max_iters={checkpoint['step'] + 1}"])
    assert code == 0 and err.count("\n") == 1
    assert re.fullmatch(
        rf"warning: \S+\.lock was left by a run that has ended \(pid {proc.pid} on .*\); "
        rf"taking it over\n",
        err,
    ), err
    assert not (tmp_path / "out" / ".lock").exists()  # released at the end


# --- divergence --------------------------------------------------------------------------------------


def test_absurd_learning_rate_stops_with_one_line(tmp_path):
    code, _, err = run_train(tiny_args(tmp_path, "--learning_rate=1e6", "--ckpt_interval=1"))
    assert code == 1
    message = one_line(err)
    assert re.search(r"became (nan|inf|-inf) at step \d+; training stopped", message), message
    assert "try a lower --learning_rate (now 1e+06)" in message


def test_nan_loss_names_the_step_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    calls = {"n": 0}
    forward = GPT.forward

    def poisoned(self, idx, targets=None, **kwargs):
        logits, loss = forward(self, idx, targets, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] == 5:  # the training forward of step 4
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", poisoned)
    code, _, err = run_train(tiny_args(tmp_path, "--ckpt_interval=2"))
    assert code == 1
    checkpoint_file = tmp_path / "out" / "ckpt.pt"
    assert one_line(err) == (
        f"error: the loss became nan at step 4; training stopped with {checkpoint_file} left at "
        f"step 4, the last state whose loss was sane; resume from it with a lower --learning_rate "
        f"(now 0.001)\n"
    )
    checkpoint = load_checkpoint(checkpoint_file)
    assert checkpoint["step"] == 4 and all(torch.isfinite(t).all() for t in checkpoint["model"].values())


def test_non_finite_parameters_are_never_saved(tmp_path, monkeypatch):
    """A step that leaves inf in the weights stops training before any save can overwrite the last checkpoint."""
    step = optim.AdamW.step
    calls = {"n": 0}

    def corrupting_step(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("inf"))
        return result

    monkeypatch.setattr(optim.AdamW, "step", corrupting_step)
    code, _, err = run_train(tiny_args(tmp_path, "--ckpt_interval=1"))
    assert code == 1 and "at step 3" in one_line(err) and "left at step 2" in err
    assert load_checkpoint(tmp_path / "out")["step"] == 2


def test_a_new_run_keeps_the_previous_checkpoint_one_generation_back(tmp_path):
    assert run_train(tiny_args(tmp_path))[0] == 0
    first = (tmp_path / "out" / "ckpt.pt").read_bytes()
    code, _, err = run_train(tiny_args(tmp_path, "--seed=2", "--run_name=t2"))  # a TensorBoard run of its own
    assert code == 0 and err.startswith("warning: ") and "kept it as" in err
    assert (tmp_path / "out" / "ckpt.prev.pt").read_bytes() == first
    assert (tmp_path / "out" / "ckpt.pt").read_bytes() != first


def test_temp_files_of_a_killed_save_are_cleaned_up(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    dead = out / ".ckpt.pt.tmp-999999999"  # no such process
    dead.write_bytes(b"half a checkpoint")
    live = out / f".ckpt.pt.tmp-{os.getppid()}"  # a running process may still be saving
    live.write_bytes(b"in progress")
    assert run_train(tiny_args(tmp_path))[0] == 0
    assert not dead.exists() and live.exists()


# --- one run per out_dir -----------------------------------------------------------------------------


def test_a_second_run_into_the_same_out_dir_is_refused_and_destroys_nothing(trained, tmp_path):
    """Two real processes. Unlocked, both would exit 0, one replacing the other's checkpoint and both
    keeping the earlier run's as ckpt.prev.pt, so that earlier run would be lost."""
    out = tmp_path / "out"
    trained.copy_to(out)
    earlier = (out / "ckpt.pt").read_bytes()

    with _running(tiny_args(tmp_path, "--max_iters=1000000", "--eval_interval=1000000", "--seed=2")) as first:
        _wait_for(_said(first, "step 0:"), first, "training")
        code, _, err = run("train", tiny_args(tmp_path, "--seed=3"), subprocess_=True)
        assert code == 1
        message = one_line(err)
        assert f"out_dir {out} is in use by another training run (pid {first.pid} on " in message
        assert "wait for it to finish or stop it, or choose another --out_dir" in message
        assert (out / "ckpt.pt").read_bytes() == earlier and not (out / "ckpt.prev.pt").exists()

        first.send_signal(signal.SIGTERM)
        assert _finish(first).count("\n") == 1 and first.returncode == 143  # its one warning: the earlier run kept
    assert (out / "ckpt.prev.pt").read_bytes() == earlier
    assert not (out / ".lock").exists()
    code, _, err = run_train(
        tiny_args(
            tmp_path,
            "--resume",
            "--max_iters=1000000",
            "--eval_interval=1000000",
            f"--max_iters={load_checkpoint(out)['step'] + 1}",
            "--seed=2",
        )
    )
    assert (code, err) == (0, "")  # the lock went with the first run


def test_lock_file_names_its_owner_and_goes_with_it(tmp_path):
    from trainer.runtime import RunLock

    with RunLock(tmp_path) as lock:
        owner = json.loads(lock.path.read_text())
        assert owner["pid"] == os.getpid() and owner["host"] and owner["command"].startswith("python")
        with (
            pytest.raises(UserError, match=rf"in use by another training run \(pid {os.getpid()} on "),
            RunLock(tmp_path),
        ):
            pass
    assert not (tmp_path / ".lock").exists()
    (tmp_path / ".lock").mkdir()  # not a lock file: refused, and left alone
    with pytest.raises(UserError, match="move it away"), RunLock(tmp_path):
        pass
    assert (tmp_path / ".lock").is_dir()


def test_a_run_that_stops_before_writing_leaves_no_folder_it_made(tmp_path):
    from trainer.runtime import RunLock

    with RunLock(tmp_path / "made"):  # a fine-tune whose source cannot be read stops here, having written nothing
        pass
    assert not (tmp_path / "made").exists()
    with RunLock(tmp_path / "wrote"):
        (tmp_path / "wrote" / "ckpt.pt").write_bytes(b"x")
    assert (tmp_path / "wrote" / "ckpt.pt").exists()
    (tmp_path / "given").mkdir()  # a folder the user made stays, empty or not
    with RunLock(tmp_path / "given"):
        pass
    assert (tmp_path / "given").is_dir()


# --- checkpoints that load but do not fit ------------------------------------------------------------


def _edit(trained: Trained, folder: Path, change) -> Path:
    checkpoint = torch.load(trained.char, weights_only=True)
    change(checkpoint)
    path = folder / "ckpt.pt"
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda p: p.pop("tokenizer"), "it has no 'tokenizer'"),
        (lambda p: p.update(step="3"), "'step' is not a step count"),
        (lambda p: p["model"].update({"wte.weight": [1.0, 2.0]}), "not a set of named floating-point tensors"),
        (lambda p: p["model"].update({"wte.weight": torch.zeros(28, 16, dtype=torch.long)}), "floating-point"),
        (lambda p: p["model"].pop("ln_f.weight"), "ln_f.weight: expected (16,), found nothing"),
        (lambda p: p["model_config"].update(n_layer=3), "its model_config says 3 layers, its weights hold 1"),
        (lambda p: p["model_config"].pop("arch"), "'model_config' is missing or does not hold exactly"),
        (lambda p: p["model_config"].update(n_head=3), "its model_config is invalid ('n_embd' must be a multiple"),
        (
            lambda p: p["model_config"].update(n_embd=2**30, n_head=1),
            "wte.weight: expected (28, 1073741824), found (28, 16)",
        ),  # refused before anything that size exists
        (lambda p: p["model_config"].update(n_embd=10**12, n_head=1), "'n_embd' must be at most 2,147,483,647"),
        (lambda p: p["tokenizer"].update(chars="abc"), "its tokenizer has 3 tokens but its model_config 28"),
        (lambda p: p.update(tokenizer={"name": "gpt2", "kept_ids": [10**9]}), "holds no usable tokenizer"),
    ],
)
def test_a_checkpoint_whose_parts_do_not_fit_is_refused_before_use(trained, tmp_path, change, words):
    from formats import load_model

    path = _edit(trained, tmp_path, change)
    with pytest.raises(CheckpointError) as info:
        load_model(path, torch.device("cpu"))
    assert words in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda p: p.pop("rng"), "'rng', which resuming needs, is missing"),
        (lambda p: p.update(best_val_loss="low"), "'best_val_loss', which resuming needs"),
        (lambda p: p["rng"].update(torch=torch.zeros(3)), "'rng' does not hold the random generators' states"),
        (lambda p: p.update(eval_step=2.5), "'eval_step' is not a step"),
    ],
)
def test_resuming_needs_more_than_sampling(trained, tmp_path, change, words):
    from formats import load_model, validate

    path = _edit(trained, tmp_path, change)
    assert load_model(path, torch.device("cpu")).checkpoint["step"] == 2  # enough to sample from
    with pytest.raises(CheckpointError, match=re.escape(words)):
        validate(load_checkpoint(path), path, for_resume=True)


def test_resume_takes_the_optimizer_settings_from_the_config_not_the_checkpoint(trained, tmp_path):
    """Only the optimizer's state is the checkpoint's: its settings could be anything."""
    out = tmp_path / "out"
    out.mkdir()

    def odd_settings(checkpoint: dict) -> None:
        for group in checkpoint["optimizer"]["param_groups"]:
            group.update(betas="fast", weight_decay=-1.0)

    _edit(trained, out, odd_settings)
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--max_iters=3"))
    assert (code, err) == (0, "") and load_checkpoint(out)["step"] == 3


def test_a_checkpoint_is_read_on_the_cpu_whatever_device_is_asked(trained, tmp_path):
    """Where the model runs is decided apart from loading, so a device missing here cannot make a
    healthy checkpoint look damaged."""
    checkpoint = load_checkpoint(trained.char)
    assert all(t.device.type == "cpu" for t in checkpoint["model"].values())
    trained.copy_to(tmp_path / "out")
    for program, args in (("sample", [f"--out_dir={trained.char}"]), ("train", tiny_args(tmp_path, "--resume"))):
        code, _, err = run(program, [*args, "--device=cuda:99"])
        assert code == 2 and "--device=cuda:99 but" in one_line(err) and "checkpoint" not in err


# --- signals and pipes: the same save-and-exit, whatever ends the terminal ----------------------------


class _ClosedPipe(io.StringIO):
    """stdout read by `head -1`: after the first line its reader has gone, and every write fails."""

    failures = 0

    def write(self, text: str) -> int:
        if "\n" in self.getvalue():
            _ClosedPipe.failures += 1
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        return super().write(text)


def test_a_closed_pipe_does_not_stop_training(tmp_path):
    """`python train.py | head -1`: the run goes on past the closed pipe, trains to the end and saves."""
    import train
    from common.cli import run_cli

    err = io.StringIO()
    with contextlib.redirect_stdout(_ClosedPipe()) as out, contextlib.redirect_stderr(err):
        code = run_cli(train.main, tiny_args(tmp_path), survive_closed_output=True)
    assert (code, err.getvalue()) == (0, "")
    assert out.getvalue().startswith("prepared ") and out.getvalue().count("\n") == 1 and _ClosedPipe.failures
    assert load_checkpoint(tmp_path / "out")["step"] == 6


def test_sighup_with_the_terminal_gone_saves_and_exits_129(tmp_path):
    """An ssh drop: stdout goes dead (writes fail) and SIGHUP arrives; the run saves where it stopped. The run starts
    as from a terminal, where SIGHUP is not ignored (under `nohup` it is, and the run rightly goes on)."""
    args = tiny_args(tmp_path, "--max_iters=1000000", "--eval_interval=1000000", "--ckpt_interval=1")
    with _running(args, read_lines=False) as proc:
        assert proc.stdout.readline().startswith("prepared ")
        proc.stdout.close()  # every later write to stdout fails with EPIPE
        _wait_for((tmp_path / "out" / "ckpt.pt").exists, proc, "its first checkpoint")
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=PATIENCE)
    err = proc.stderr.read()
    assert (proc.returncode, err) == (128 + signal.SIGHUP, ""), err[-2000:]
    step = load_checkpoint(tmp_path / "out")["step"]
    assert step > 0 and not (tmp_path / "out" / ".lock").exists()
    code, _, err = run_train([*args, "--resume", f"--max_iters={step + 1}"])
    assert (code, err) == (0, "") and load_checkpoint(tmp_path / "out")["step"] == step + 1


def test_under_nohup_sighup_is_left_ignored():
    from common.cli import stop_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.SIGHUP not in stop_signals()
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert signal.SIGHUP in stop_signals() or previous == signal.SIG_IGN


def test_a_preparation_killed_mid_write_leaves_nothing_behind(tmp_path):
    """kill -9 while the token files are written: the next preparation deletes the dead one's staging
    folder, and keeps one that a live preparation is still writing."""
    corpus, data_dir = tmp_path / "corpus.txt", tmp_path / "prep"
    corpus.write_text(TEXT)
    script = (
        f"import os, signal, sys; sys.path.insert(0, {str(ROOT)!r}); import data.prepare as p; "
        f"p._meta_checksum = lambda meta: os.kill(os.getpid(), signal.SIGKILL); "
        f"p.prepare({str(corpus)!r}, 'char', {str(data_dir)!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    assert proc.wait(timeout=PATIENCE) == -signal.SIGKILL
    [staging] = data_dir.iterdir()  # the token files written, meta.json not yet
    assert f".tmp-{proc.pid}-" in staging.name and (staging / "train.bin").stat().st_size > 0
    live = data_dir / staging.name.replace(f"tmp-{proc.pid}-", f"tmp-{os.getppid()}-")
    live.mkdir()

    from data.prepare import prepare

    prepared = prepare(str(corpus), "char", data_dir, quiet=True)
    assert not staging.exists() and live.is_dir()
    assert sorted(data_dir.iterdir()) == sorted([prepared.folder, live])


# --- paths that escape: nothing written outside the folders named, never through a link --------------


def _plant_links_at_the_first_step(out: Path, names: tuple[str, ...], monkeypatch) -> list[Path]:
    """Links under `names` in out_dir, planted once the run has started (at its first step, nothing saved yet), each
    to a file of someone else's: those files."""
    victims = {name: out.parent / f"victim-{n}.txt" for n, name in enumerate(names)}
    original = Batches.train

    def plant_links(self):
        for name, victim in victims.items():
            if not victim.exists():
                victim.write_text("someone else's file\n")
                (out / name).symlink_to(victim)
        return original(self)

    monkeypatch.setattr(Batches, "train", plant_links)
    return list(victims.values())


def test_links_planted_in_out_dir_are_never_followed_nor_replaced(trained, tmp_path, monkeypatch):
    """Links planted after the run started where its page goes and under a staging name: the files they point to
    stay as they were, the links stay links (a run replaces only files it wrote), and the run goes on; the page is
    one warning."""
    out = tmp_path / "out"
    trained.copy_to(out)
    earlier = (out / "ckpt.pt").read_bytes()
    victims = _plant_links_at_the_first_step(out, ("attention.html", f".ckpt.pt.tmp-{os.getpid()}"), monkeypatch)
    code, _, err = run_train(tiny_args(tmp_path, "--ckpt_interval=1", '--watch_sentences=["the dog saw it"]'))
    assert code == 0 and "kept it as" in err
    assert "no attention page: " in err and "attention.html is a symbolic link" in err and "never followed" in err
    assert all(victim.read_text() == "someone else's file\n" for victim in victims)
    assert (out / "attention.html").is_symlink() and (out / "ckpt.prev.pt").read_bytes() == earlier
    assert load_checkpoint(out)["step"] == 6


def test_a_link_planted_where_the_earlier_run_is_kept_stops_the_run_and_keeps_that_run(trained, tmp_path, monkeypatch):
    """A link at ckpt.prev.pt, planted after the run started: the first save, which would keep the earlier run
    there, stops the run with one line instead; the earlier run is still ckpt.pt, and the link and its file are as
    they were."""
    out = tmp_path / "out"
    trained.copy_to(out)
    earlier = (out / "ckpt.pt").read_bytes()
    [victim] = _plant_links_at_the_first_step(out, ("ckpt.prev.pt",), monkeypatch)
    code, _, err = run_train(tiny_args(tmp_path, "--ckpt_interval=1"))
    assert code == 1 and "ckpt.prev.pt is a symbolic link, where the earlier run's checkpoint goes" in one_line(err)
    assert victim.read_text() == "someone else's file\n" and (out / "ckpt.prev.pt").is_symlink()
    assert (out / "ckpt.pt").read_bytes() == earlier


def test_replace_file_replaces_a_link_and_leaves_its_target(tmp_path):
    from common.files import replace_file

    target = tmp_path / "target.txt"
    target.write_text("keep me")
    (tmp_path / "page.html").symlink_to(target)
    replace_file(tmp_path / "page.html", lambda fh: fh.write(b"new"))
    assert target.read_text() == "keep me" and (tmp_path / "page.html").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "target.txt"]


# --- poisoned numbers: a diverged run leaves a state that resumes --------------------------------------


def test_a_diverged_run_leaves_the_last_sane_state_which_resumes(trained, tmp_path):
    """A learning rate that blows up, saving every step, on resume: the ruined states are never saved, the
    message names the step left on disk, and that checkpoint resumes at a sane learning rate."""
    out = tmp_path / "out"
    trained.copy_to(out)
    code, _, err = run_train(
        tiny_args(tmp_path, "--resume", "--learning_rate=30", "--ckpt_interval=1", "--max_iters=30")
    )
    assert code == 1
    message = one_line(err)
    assert f"training stopped with {out / 'ckpt.pt'} left at step 2, the last state whose loss was sane" in message
    assert "resume from it with a lower --learning_rate (now 30)" in message
    checkpoint = load_checkpoint(out)
    assert checkpoint["step"] == 2 and all(torch.isfinite(t).all() for t in checkpoint["model"].values())
    code, _, err = run_train(tiny_args(tmp_path, "--resume"))
    assert (code, err) == (0, "") and load_checkpoint(out)["step"] == 6


def test_saves_skipped_while_the_loss_is_blown_up_are_reported_once_it_recovers(tmp_path, monkeypatch):
    from common.errors import GptwatchWarning

    real = Trainer.mean_loss

    def state_loss(self, model, split, batches):  # the loss a save checks (one batch), blown up at steps 2 and 3
        blown_up = batches == 1 and self.state.step in (2, 3)
        return 1e3 if blown_up else real(self, model, split, batches)

    monkeypatch.setattr(Trainer, "mean_loss", state_loss)
    saved = []
    monkeypatch.setattr(
        CheckpointWriter,
        "save",
        lambda self, checkpoint, step, stopped=False: saved.append(step) or setattr(self, "saved_step", step),
    )
    with pytest.warns(
        GptwatchWarning,
        match=r"checkpoints of steps 2 to 3 were not saved: the loss had blown up "
        r"to 1000, .* back at [\d.]+ at step 4, saved now",
    ):
        fit(tmp_path, "--ckpt_interval=1")
    assert saved[:3] == [1, 4, 5] and 2 not in saved and 3 not in saved


# --- two runs, one name --------------------------------------------------------------------------------


def test_a_run_whose_out_dir_is_taken_over_stops_without_writing_there(trained, tmp_path, monkeypatch):
    """out_dir deleted under a running training, and a second run takes the folder: the first one's next
    save would replace the second's checkpoint; it stops with one line instead."""
    from trainer.runtime import RunLock

    out = tmp_path / "out"
    second = RunLock(out)
    held = contextlib.ExitStack()  # the second run's lock, held from its first step to the end
    original = Batches.train

    def taken_over(self):
        if second._fd is None:
            shutil.rmtree(out)
            held.enter_context(second)
            trained.copy_to(out)
        return original(self)

    monkeypatch.setattr(Batches, "train", taken_over)
    theirs = trained.char.read_bytes()
    try:
        code, _, err = run_train(tiny_args(tmp_path, "--ckpt_interval=1"))
        assert code == 1 and (out / ".lock").exists()
    finally:
        held.close()
    assert f"out_dir {out} was deleted or taken over by another run while this one ran" in one_line(err)
    assert (out / "ckpt.pt").read_bytes() == theirs and sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]
