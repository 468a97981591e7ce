"""Writes that fail for real: a small tmpfs that fills up under out_dir, log_dir, data_dir or an export.

Mounting needs root; where the test cannot mount one it is skipped, saying why. (The simulated
full disk of tests/test_bad_input.py runs everywhere.)
"""

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from formats import load_checkpoint
from tests.commands import one_line, run, run_sample, run_train, tiny_args


@pytest.fixture
def small_disk(tmp_path, request):
    """A mounted tmpfs of `request.param` bytes, unmounted afterwards."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={request.param}", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {(done.stderr or done.stdout).strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize("small_disk", ["100k"], indirect=True)
def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_keeps_the_last_checkpoint(tmp_path, small_disk):
    """Room for one checkpoint (about 70 kB) but not for the temporary file of the next one: torch.save
    fails inside its zip writer, which torch reports as a RuntimeError about file positions."""
    out = small_disk / "out"
    code, _, err = run_train(tiny_args(tmp_path, f"--out_dir={out}", "--ckpt_interval=1"))
    assert code == 1
    assert one_line(err) == (
        f"error: cannot write checkpoint {out / 'ckpt.pt'} (No space left on device on the disk "
        f"mounted at {small_disk}); free disk space or choose a writable --out_dir; the previous "
        f"checkpoint is intact\n"
    )
    assert load_checkpoint(out)["step"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]  # no temporary file, and the lock released


@pytest.mark.parametrize("small_disk", ["64k"], indirect=True)
def test_a_full_log_dir_is_one_warning_and_training_goes_on(tmp_path, small_disk):
    """TensorBoard writes from a background thread; its failure must not print that thread's traceback,
    nor a second one from the main thread, nor stop the run."""
    args = tiny_args(tmp_path, f"--log_dir={small_disk}", '--watch_sentences=["the dog saw it"]')
    code, _, err = run("train", args, subprocess_=True)  # the writer thread's failure, as a real process shows it
    assert code == 0, err
    assert err == (
        f"warning: cannot write TensorBoard logs to {small_disk / 't'} (No space left on device "
        f"on the disk mounted at {small_disk}); going on without them: free disk space or choose "
        f"another --log_dir\n"
    )
    assert load_checkpoint(tmp_path / "out")["step"] == 6


@pytest.mark.parametrize("small_disk", ["4k"], indirect=True)
def test_a_full_data_dir_is_one_line_and_leaves_no_half_prepared_folder(tmp_path, small_disk):
    code, _, err = run_train(tiny_args(tmp_path, f"--data_dir={small_disk}"))
    assert code == 1
    assert one_line(err) == (
        f"error: cannot write prepared data to {small_disk} (No space left on device on the "
        f"disk mounted at {small_disk}); free disk space or choose a writable --data_dir\n"
    )
    assert list(Path(small_disk).iterdir()) == []


@pytest.mark.parametrize("small_disk", ["16k"], indirect=True)
@pytest.mark.parametrize(
    "target, library, what",
    [("tl", "transformer_lens", "the TransformerLens file"), ("hf", "transformers", "the Hugging Face folder")],
)
def test_a_full_disk_during_an_export_is_one_line_naming_the_disk_and_leaves_nothing(
    tmp_path, small_disk, target, library, what
):
    """torch.save reports a full disk as a zip position error, safetensors as its own SafetensorError: both are
    the one line of any full disk, naming where it is mounted."""
    pytest.importorskip(library, reason=f"--export {target} needs {library} (requirements-interop.txt)")
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    code, _, err = run_sample([f"--out_dir={folder}", "--export", target, str(small_disk / "model")])
    assert code == 1
    assert one_line(err) == (
        f"error: cannot write {what} {small_disk / 'model'} (No space left on device on the "
        f"disk mounted at {small_disk}); free disk space or choose another path\n"
    )
    assert list(small_disk.iterdir()) == []


def _fill(disk: Path) -> None:
    """Every byte of `disk` taken, by one file."""
    with contextlib.suppress(OSError), open(disk / "filler", "wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()


@pytest.mark.parametrize("small_disk", ["256k"], indirect=True)
def test_a_full_disk_where_the_run_lock_goes_is_one_line_and_leaves_no_folder(trained, tmp_path, small_disk):
    """out_dir (a new run, and a resume) or log_dir on a full disk: the run lock cannot be written, which is one
    line naming the disk, and no folder the run made is left behind."""
    trained.copy_to(small_disk / "run")
    _fill(small_disk)
    for where, lock, option in (
        ([f"--out_dir={small_disk / 'new'}"], small_disk / "new" / ".lock", "--out_dir"),
        ([f"--out_dir={small_disk / 'run'}", "--resume"], small_disk / "run" / ".lock", "--out_dir"),
        ([f"--log_dir={small_disk / 'logs'}"], small_disk / "logs" / "t" / ".lock", "--run_name"),
    ):
        code, _, err = run_train(tiny_args(tmp_path, *where))
        assert code == 1 and one_line(err) == (
            f"error: cannot write the run lock {lock} (No space left on device on the disk mounted at {small_disk}); "
            f"free disk space or choose another {option}\n"
        )
        assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "run"]
        assert sorted(p.name for p in (small_disk / "run").iterdir()) == ["ckpt.pt"]


@pytest.mark.parametrize("small_disk", ["16k"], indirect=True)
def test_a_data_dir_on_a_full_disk_says_the_disk_is_full(tmp_path, small_disk):
    """numpy writes the prepared tokens itself and reports a full disk as a count ("5616 requested and 0 written"),
    without its errno: the message still says the disk is full, and where."""
    _fill(small_disk)
    code, _, err = run_train(tiny_args(tmp_path, f"--data_dir={small_disk / 'prep'}"))
    assert code == 1 and one_line(err) == (
        f"error: cannot write prepared data to {small_disk / 'prep'} (No space left on device on the disk mounted at "
        f"{small_disk}); free disk space or choose a writable --data_dir\n"
    )
