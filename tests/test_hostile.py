"""Hostile and careless input, kind by kind: each test holds a mechanism (named in its docstring) against
several members of its kind, not one example. The one-line messages themselves are cases of
tests/test_bad_input.py (docs/errors.md); a tmpfs that really fills up is tests/test_full_disk.py."""

from __future__ import annotations

import errno
import html
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from common import files
from common.cli import for_terminal, markdown_literal
from common.files import destination, fresh_file, fresh_folder, os_error_of, replace_file
from common.parsing import NotParsed, parse_int, parse_json
from formats import CheckpointError, load_checkpoint, validate
from formats.checkpoint import save_checkpoint, saved_settings
from model.config import MAX_BLOCK_SIZE, GPTConfig
from model.gpt import GPT
from tests.commands import PATIENCE, ROOT, TEXT, one_line, run_sample
from tests.random_checkpoints import make_checkpoint

DEAD = 999_999_999  # a pid no process has


def _contents(folder: Path) -> dict[str, bytes | str]:
    """What a folder holds, links included (as "-> target"), for before/after comparisons."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        out[key] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return out


# --- 1. nothing written through a link: exclusive, unpredictable staging for every writer ---------------------


def test_staging_names_are_unguessable_and_taken_only_if_new(tmp_path, monkeypatch):
    """`fresh_file` / `fresh_folder` (every writer's staging): a name carries a random part, and a name that
    exists (a planted link, another process's file) is skipped, never opened or written into."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    tokens = iter(["planted", "planted", "free1", "free2"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(tokens))
    planted = tmp_path / f".m.pt.tmp-{os.getpid()}-planted"
    planted.symlink_to(victim)
    fd, name = fresh_file(tmp_path / "m.pt")
    os.close(fd)
    folder = fresh_folder(tmp_path / "hf")
    assert name.name == f".m.pt.tmp-{os.getpid()}-free1" and folder.name == f".hf.tmp-{os.getpid()}-free2"
    assert victim.read_text() == "keep me" and planted.is_symlink()
    monkeypatch.undo()
    assert len({fresh_folder(tmp_path / "x").name for _ in range(3)}) == 3  # random: nothing to plant ahead


@pytest.fixture(scope="module")
def checkpoint_folder(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"), "gpt2-char")


def _export(target: str, path: Path | str, checkpoint: Path) -> tuple[int, str, str]:
    return run_sample([f"--out_dir={checkpoint}", "--export", target, str(path)])


@pytest.mark.parametrize("target", ["tl", "hf"])
def test_an_export_never_writes_through_links_planted_beside_or_at_it(tmp_path, checkpoint_folder, target):
    """A link at the destination itself is refused, left as it is with the file it points to (as at every output:
    never followed or replaced); links under the old predictable staging names (`.<name>.tmp-<pid>`) are never
    written through, and the export is a real file or folder."""
    pytest.importorskip("transformer_lens" if target == "tl" else "transformers")
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in (f".model.tmp-{os.getpid()}", f".model.old-{os.getpid()}"):
        (out / name).symlink_to(victim)
    (out / "model").symlink_to(victim)
    code, _, err = _export(target, out / "model", checkpoint_folder)
    assert code == 1 and "model is a symbolic link" in one_line(err)
    assert (out / "model").is_symlink() and victim.read_text() == "someone else's file\n"
    (out / "model").unlink()
    code, _, err = _export(target, out / "model", checkpoint_folder)
    assert code == 0, err
    assert victim.read_text() == "someone else's file\n"
    assert not (out / "model").is_symlink() and (
        (out / "model").is_file() if target == "tl" else (out / "model" / "gptwatch_export.json").is_file()
    )


def test_export_hf_to_a_link_to_an_empty_folder_leaves_the_link_and_the_folder(tmp_path, checkpoint_folder):
    pytest.importorskip("transformers")
    (tmp_path / "empty").mkdir()
    (tmp_path / "linkdir").symlink_to(tmp_path / "empty")
    code, _, err = _export("hf", tmp_path / "linkdir", checkpoint_folder)
    assert code == 1 and "linkdir is a symbolic link" in one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "linkdir"]
    assert list((tmp_path / "empty").iterdir()) == [] and (tmp_path / "linkdir").is_symlink()


def test_tensorboard_logs_never_write_through_links_planted_under_its_usual_names(tmp_path):
    """TensorBoard names its event file by the time, host and pid, and torch's add_hparams opens a second one:
    links planted under those names for the coming seconds stay unwritten; the run's one event file has a name
    nobody could guess, and holds the scalars and the hparams."""
    import socket

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from watch.show.tensorboard import TensorBoardWriter

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    now = int(time.time())
    for second in range(now, now + 5):
        for uid in range(4):
            (run / f"events.out.tfevents.{second:010d}.{socket.gethostname()}.{os.getpid()}.{uid}").symlink_to(victim)
    writer = TensorBoardWriter(run)
    writer.add_scalar("loss", 1.5, 0)
    writer.add_hparams({"lr": 0.1}, {"hparam/loss": 1.0})
    writer.close()
    assert victim.read_text() == "keep me" and not writer.failed
    [events] = [p for p in run.iterdir() if not p.is_symlink()]
    assert re.fullmatch(r"events\.out\.tfevents\..*\.[0-9a-f]{16}", events.name)
    logged = EventAccumulator(str(events)).Reload()
    assert {"loss", "hparam/loss"} <= set(logged.Tags()["scalars"])
    assert "_hparams_/experiment" in logged.PluginTagToContent("hparams")


# --- 2. no debris: an interrupted export removes what it wrote; a killed one's is removed next time -----------


def _interrupting(signum: int | None):
    """A save that writes a little, then is interrupted: by Ctrl-C (None), or by a real signal."""

    def save(*args, **kwargs):
        where = args[1] if len(args) > 1 else args[0]
        if isinstance(where, (str, Path)):  # save_pretrained(folder): a file in it
            Path(where, "model.safetensors").write_bytes(b"half")
        else:
            where.write(b"PK\x03\x04 half")
        if signum is None:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signum)
        time.sleep(10)  # the handler raises here

    return save


@pytest.mark.parametrize("target", ["tl", "hf"])
@pytest.mark.parametrize("signum", [None, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_export_leaves_nothing_behind(tmp_path, checkpoint_folder, monkeypatch, target, signum):
    """SIGINT and SIGTERM (which `cli.run_cli` makes unwind like Ctrl-C) in the middle of writing: the
    staging file or folder is removed, and what stood at the destination (an earlier export) is untouched."""
    if target == "tl":
        pytest.importorskip("transformer_lens")
        monkeypatch.setattr(torch, "save", _interrupting(signum))
    else:
        transformers = pytest.importorskip("transformers")
        monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", _interrupting(signum))
    (tmp_path / "keep.txt").write_text("mine")
    before = _contents(tmp_path)
    if signum is None:
        assert _export(target, tmp_path / "model", checkpoint_folder)[0] == 130
    else:
        with pytest.raises(SystemExit) as stopped:
            _export(target, tmp_path / "model", checkpoint_folder)
        assert stopped.value.code == 128 + signum
    assert _contents(tmp_path) == before


@pytest.mark.parametrize("target", ["tl", "hf"])
def test_what_a_killed_export_left_is_removed_and_a_live_ones_is_kept(tmp_path, checkpoint_folder, target):
    """`files.remove_dead_leftovers` for exports, as for checkpoints: staging files and folders of processes
    that have ended (`kill -9`, a power cut), beside the destination and, for a folder, inside it."""
    pytest.importorskip("transformer_lens" if target == "tl" else "transformers")
    dead_file, live_file = tmp_path / f".model.tmp-{DEAD}-ab", tmp_path / f".model.tmp-{os.getppid()}-cd"
    dead_folder = tmp_path / f".model.tmp-{DEAD}-ef"
    for path in (dead_file, live_file):
        path.write_bytes(b"half")
    dead_folder.mkdir()
    (dead_folder / "config.json").write_text("{")
    if target == "hf":
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / f".model.tmp-{DEAD}-gh").mkdir()  # left inside an (empty) destination
    code, _, err = _export(target, tmp_path / "model", checkpoint_folder)
    assert code == 0, err
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"model", live_file.name}
    if target == "hf":
        assert not any(p.name.startswith(".") for p in (tmp_path / "model").iterdir())


# --- 3. a full disk is one line naming the disk, whatever library met it ---------------------------------------


def test_the_oserror_behind_a_librarys_own_words_is_found():
    """`files.os_error_of`: torch's zip writer wraps the OSError (its context), safetensors describes it in
    Rust's words; both become the OSError, and other errors stay what they are."""
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64") from None
    except RuntimeError as exc:
        wrapped = exc
    rust = Exception(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
    )
    for exc in (wrapped, rust, RuntimeError("No space left on device")):
        found = os_error_of(exc)
        assert found is not None and found.errno == errno.ENOSPC
    quota = os_error_of(Exception("IoError(Os { code: 122, kind: QuotaExceeded, ... })"))
    assert quota is not None and quota.errno == errno.EDQUOT
    assert os_error_of(ValueError("something else")) is None


def test_replace_file_reports_the_full_disk_torch_save_met_and_names_its_mount(tmp_path):
    """A file object whose writes fail as a full disk's do, under torch.save: `replace_file` raises the
    OSError, not torch's RuntimeError, and `write_error` names the disk by where it is mounted."""

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.fh, name)

    with pytest.raises(OSError) as failed:
        replace_file(tmp_path / "m.pt", lambda fh: torch.save({"w": torch.zeros(1000)}, Full(fh)))
    assert failed.value.errno == errno.ENOSPC and list(tmp_path.iterdir()) == []
    words = files.write_error(failed.value, tmp_path / "m.pt")
    assert words == f"No space left on device on the disk mounted at {files.mount_point(tmp_path)}"
    assert os.path.ismount(files.mount_point(tmp_path))


def test_a_full_disk_in_hugging_faces_writer_is_one_line(tmp_path, checkpoint_folder, monkeypatch):
    """safetensors reports a full disk as its own SafetensorError: one line naming the disk, nothing left."""
    transformers = pytest.importorskip("transformers")

    def full(self, folder, **kwargs):
        raise type("SafetensorError", (Exception,), {})(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full)
    code, _, err = _export("hf", tmp_path / "model", checkpoint_folder)
    assert code == 1 and err == (
        f"error: cannot write the Hugging Face folder {tmp_path / 'model'} (No space left "
        f"on device on the disk mounted at {files.mount_point(tmp_path)}); free disk space "
        f"or choose another path\n"
    )
    assert list(tmp_path.iterdir()) == []


# --- 4. destinations with no name: '.', 'out/', '..' name folders ----------------------------------------------


@pytest.mark.parametrize("text", ["newdir/", ".", "..", "a/.", "a/..", "/"])
def test_a_path_that_names_a_folder_is_never_a_file(text):
    with pytest.raises(files.UserError, match="names a folder"):
        destination(text, "--export tl", folder=False, fix="give a file path")


def test_a_folder_without_a_name_is_the_folder_it_means(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert destination(".", "--export hf", folder=True, fix="") == tmp_path
    assert destination("new/", "--export hf", folder=True, fix="") == Path("new")
    assert destination("a/..", "--export hf", folder=True, fix="") == tmp_path
    assert destination("m.pt", "--export tl", folder=False, fix="") == Path("m.pt")
    with pytest.raises(files.UserError, match="root of the filesystem"):
        destination("/", "--export hf", folder=True, fix="")


def test_export_hf_into_the_empty_folder_the_command_runs_in(tmp_path, checkpoint_folder, monkeypatch):
    """`--export hf .`: the files go into the folder itself, which stays (the shell is in it)."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    inode = tmp_path.stat().st_ino
    code, out, err = _export("hf", ".", checkpoint_folder)
    assert code == 0, err
    assert f"wrote {tmp_path}:" in out and tmp_path.stat().st_ino == inode
    assert "gptwatch_export.json" in {p.name for p in tmp_path.iterdir()}
    code, _, err = _export("hf", ".", checkpoint_folder)  # an earlier export there is replaced, in place
    assert code == 0, err
    assert tmp_path.stat().st_ino == inode


def test_export_tl_to_a_folder_path_writes_nothing(tmp_path, checkpoint_folder):
    code, _, err = _export("tl", f"{tmp_path / 'newdir'}/", checkpoint_folder)
    assert code == 1 and "names a folder (it ends in /)" in err and list(tmp_path.iterdir()) == []


# --- 5. sizes no model can have: one place, for configs and checkpoints -----------------------------------------


@pytest.mark.parametrize(
    "sizes, words",
    [
        ({"arch": "modern", "n_embd": 16, "n_head": 16}, "use n_head=8"),
        ({"arch": "modern", "n_embd": 24, "n_head": 8}, "use n_head=6"),
        ({"arch": "modern", "n_embd": 15, "n_head": 5}, "use n_embd=30"),
        ({"block_size": MAX_BLOCK_SIZE + 1}, "'block_size' must be at most 16,777,216"),
        ({"arch": "modern", "block_size": 10**9}, "'block_size' must be at most"),
    ],
)
def test_sizes_no_model_can_have_are_refused_by_the_config(sizes, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        GPTConfig(vocab_size=50, **sizes)


def test_the_same_sizes_are_fine_where_the_rule_does_not_apply():
    GPTConfig(vocab_size=50, n_embd=16, n_head=16)  # gpt2: no rotary, any head size
    GPTConfig(vocab_size=50, arch="modern", n_embd=16, n_head=8, block_size=MAX_BLOCK_SIZE)


# --- 6 and 7. what a checkpoint claims and records is checked before it is used or allocated -------------------


def _trained(trained) -> dict:
    return torch.load(trained.char, weights_only=True)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda c: c["train_config"].update(seed=2**70), "'seed' must be between 0 and 2**32 - 1"),
        (lambda c: c["train_config"].update(seed=-1), "'seed' must be between"),
        (lambda c: c["train_config"].update(seed="1337"), "'seed' in its train_config must be an integer"),
        (lambda c: c["train_config"].update(data_dir="a\x00b"), "'data_dir' holds a NUL"),
        (lambda c: c["train_config"].update(log_dir="runs\udce9"), "'log_dir'"),
        (lambda c: c["train_config"].update(val_fraction=float("nan")), "'val_fraction' must be a finite number"),
        (lambda c: c["train_config"].update(optimizer="sgd"), "'optimizer' must be one of adamw, muon"),
        (lambda c: c["train_config"].update(watch_sentences="the dog"), "'watch_sentences' in its train_config"),
        (lambda c: c["data"].update(val_fraction=7.0), "its data record is invalid"),
        (lambda c: c["data"].update(folder="pre\x00pared"), "its data record's 'folder' is not a name or path"),
        (lambda c: c.update(train_config=[1, 2]), "is not a table of settings"),
    ],
)
def test_every_setting_a_checkpoint_records_is_checked_as_a_configs_would_be(trained, change, words):
    """`saved_settings`: a checkpoint's train_config and data record, through `TrainConfig`'s own checks."""
    checkpoint = _trained(trained)
    assert saved_settings(checkpoint, "ckpt.pt").seed == checkpoint["train_config"]["seed"]
    change(checkpoint)
    with pytest.raises(CheckpointError, match=re.escape(words)):
        saved_settings(checkpoint, "ckpt.pt")


def test_a_checkpoint_without_settings_needs_none(checkpoint_folder):
    assert saved_settings(load_checkpoint(checkpoint_folder), "ckpt.pt") is None


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda c: c.update(step=2**63), "'step' is not a step count"),
        (lambda c: c.update(eval_step=-1), "'eval_step' is not a step"),
        (lambda c: c.update(best_val_loss=float("nan")), "'best_val_loss' is nan"),
    ],
)
def test_counts_a_checkpoint_records_are_bounded(trained, change, words):
    checkpoint = _trained(trained)
    validate(checkpoint, "ckpt.pt", for_resume=True)
    change(checkpoint)
    with pytest.raises(CheckpointError, match=re.escape(words)):
        validate(checkpoint, "ckpt.pt", for_resume=True)


@pytest.mark.parametrize("look", [["--heads"], ["--attention=the dog saw it", "--html=page.html"]])
def test_a_seed_no_generator_takes_is_refused_by_every_look(trained, tmp_path, look, monkeypatch):
    """The example of the issue, in both modes that seed an untrained model from the checkpoint's seed."""
    monkeypatch.chdir(tmp_path)
    checkpoint = _trained(trained)
    checkpoint["train_config"]["seed"] = 2**70
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    code, _, err = run_sample([f"--out_dir={tmp_path}", "--device=cpu", *look])
    assert code == 1 and "'seed' must be between 0 and 2**32 - 1" in err and err.count("\n") == 1


def test_loading_counts_what_block_size_alone_allocates(tmp_path, monkeypatch):
    """A modern checkpoint's block_size is in no tensor: its rotary tables and sampling cache are counted
    against free memory before the model is built (`formats.checkpoint`), on the CPU and on the device."""
    from data.tokenizer import build_tokenizer
    from formats import load_model
    from formats.checkpoint import load_bytes

    tokenizer = build_tokenizer("char", TEXT)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=2**20, n_layer=2, n_head=2, n_embd=16, arch="modern")
    weights = GPT(GPTConfig(**{**config.to_dict(), "block_size": 16})).state_dict()
    need = load_bytes(config)
    assert need["rotary tables"] == 4 * 2 * 2**20 * 8 and need["sampling cache"] == 4 * 2 * 2**20 * 2 * 16
    assert need["weights"] == 4 * sum(t.numel() for n, t in weights.items() if n != "lm_head.weight")
    save_checkpoint(
        tmp_path / "ckpt.pt",
        {"model": weights, "model_config": config.to_dict(), "step": 0, "tokenizer": tokenizer.to_meta()},
    )
    asked = []
    monkeypatch.setattr("model.memory.available_memory", lambda device: asked.append(device.type) or 2**20)
    built = []
    monkeypatch.setattr("formats.checkpoint.GPT", lambda config: built.append(config))
    with pytest.raises(CheckpointError, match=r"needs at least 320\.0 MiB of memory on cpu"):
        load_model(tmp_path, torch.device("cpu"))
    assert asked == ["cpu"] and built == []


# --- 8. messages name the real cause ---------------------------------------------------------------------------


def test_heads_on_a_block_1_model_blames_the_block_not_the_val_split(trained, tmp_path):
    checkpoint = _trained(trained)
    checkpoint["model_config"]["block_size"] = 1
    checkpoint["model"]["wpe.weight"] = checkpoint["model"]["wpe.weight"][:1].clone()
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    code, out, err = run_sample([f"--out_dir={tmp_path}", "--device=cpu", "--heads"])
    assert code == 0, err
    assert "block_size 1 is below 16, too short for windows of held-out text" in out
    assert "too few for held-out text" not in out
    assert "no head types: " in out and "head types of" not in out  # no header over an empty table


# --- 9. parsers accept exactly what they can convert ------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("12", 12), ("-3", -3), ("+4", 4), ("10_000", 10000), ("9" * 40, 10**40 - 1)])
def test_whole_numbers_are_read(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["²", "٣", "１", " 1", "1 ", "", "1__0", "_1", "1_", "0x10", "1.0", "--1"])
def test_what_only_looks_like_a_number_is_not_one(text):
    with pytest.raises(ValueError, match="is not a whole number"):
        parse_int(text)


def test_a_number_too_long_for_any_setting_says_so_not_pythons_limit():
    with pytest.raises(NotParsed, match="a number of 5,000 digits") as refused:
        parse_int("1" * 5000)
    assert "set_int_max_str_digits" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": 1, "a": 2}', "the key 'a' is given twice; keep one"),
        (
            '{\n  "n_layer": 2,\n  "b": {"n_layer": 1},\n  "n_layer": 3\n}',
            "the key 'n_layer' is given twice (at line 4)",
        ),
    ],
)
def test_a_key_given_twice_in_one_json_object_is_refused_naming_its_line(text, said):
    """`parsing.parse_json`, which reads every JSON file (probe lines, a model's config.json, the tool's own
    records): JSON readers keep either of two values of one key, so which the writer meant is unknown. The same key
    in two objects is fine."""
    with pytest.raises(NotParsed, match=re.escape(said)):
        parse_json(text)
    assert parse_json('[{"k": 1}, {"k": 2}]') == [{"k": 1}, {"k": 2}]


@pytest.mark.parametrize("text", ["1e-400", "-2.5e-999", "1_0e-4_00"])
def test_a_number_too_small_for_a_float_is_not_read_as_zero(text, tmp_path):
    """`settings.number`, for both commands' numbers on the command line and in config files: float() reads these as 0,
    which no one wrote."""
    from common.errors import UsageError
    from common.settings import parse_cli_value, read_toml

    with pytest.raises(UsageError, match=f"{re.escape(text)} is too small for a 64-bit float, which reads it as 0"):
        parse_cli_value("learning_rate", text)
    (tmp_path / "c.toml").write_text(f"min_lr = {text}\n")
    with pytest.raises(UsageError, match="too small for a 64-bit float"):
        read_toml(tmp_path / "c.toml")
    assert parse_cli_value("weight_decay", "0e-400") == 0.0  # a zero written as one is one


@pytest.mark.parametrize("name", ["L٣H0", "L0H²", "L0H" + "1" * 5000, "L 0H0"])
def test_head_names_hold_ascii_digits_only(name):
    from watch.measure.heads import parse_head

    with pytest.raises(ValueError, match="bad head name") as refused:
        parse_head(name)
    assert len(str(refused.value)) < 300


@pytest.mark.parametrize(
    "value, words",
    [
        ('["\\ud800abc"]', "Escaped character is not a Unicode scalar value (at character 9)"),
        ('["a\\qb"]', "Unescaped '\\' in a string (at character 6)"),
        ('["the dog"', "is not valid TOML"),
    ],
)
def test_a_list_on_the_command_line_that_is_not_toml_says_why(value, words):
    from common.errors import UsageError
    from common.settings import parse_cli_value

    with pytest.raises(UsageError, match=re.escape(words)) as refused:
        parse_cli_value("watch_sentences", value)
    assert "must be a list" not in str(refused.value)


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WORLD_SIZE": "²"}, "WORLD_SIZE='²' is not a whole number"),
        ({"LOCAL_RANK": "1" * 100}, "a number of 100 digits"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2 (LOCAL_RANK=0) of WORLD_SIZE=2"),
        ({"WORLD_SIZE": "0"}, "of WORLD_SIZE=0"),
    ],
)
def test_what_the_launcher_sets_is_read_as_a_launcher_sets_it(monkeypatch, env, words):
    from common.errors import UsageError
    from common.settings import TrainConfig
    from trainer.runtime import setup

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=re.escape(words)):
        setup(TrainConfig())


# --- 10. Ctrl-C while a command starts ---------------------------------------------------------------------------


def test_a_ctrl_c_while_a_command_starts_raises_nothing_and_exits_in_one_line(monkeypatch, capsys):
    """`cli.report_interrupts_while_starting`: until `run_cli` starts the command, a Ctrl-C raises nothing that an
    import could catch and turn into another error (startup-interrupt-caught-by-a-library): it prints one line and
    exits 130. Under --debug, or where Ctrl-C is ignored (a job started in the background), it changes nothing, and
    importing the commands sets nothing; once `run_cli` runs, Ctrl-C is a KeyboardInterrupt again."""
    from common import cli

    probe = (
        "import signal, common.cli, train, sample; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    imported = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert imported.stdout.strip() == "True", imported.stderr
    exits = []
    monkeypatch.setattr(cli.os, "_exit", exits.append)
    previous = signal.getsignal(signal.SIGINT)
    try:
        for argv, kept in ((["train.py", "--debug"], True), (["train.py"], False)):
            monkeypatch.setattr(sys, "argv", argv)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            cli.report_interrupts_while_starting()
            assert (signal.getsignal(signal.SIGINT) is signal.default_int_handler) == kept
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # a Ctrl-C while the command imports
        assert exits == [130] and capsys.readouterr().err == cli.INTERRUPTED + "\n"
        seen = []
        assert cli.run_cli(lambda argv: seen.append(signal.getsignal(signal.SIGINT)), []) == 0
        assert seen == [signal.default_int_handler]
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cli.report_interrupts_while_starting()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# --- 11. what reaches a terminal is shown, never obeyed ---------------------------------------------------------


def test_for_terminal_escapes_what_a_terminal_would_act_on():
    assert for_terminal("the dog é ∅ · 猫") == "the dog é ∅ · 猫"
    assert for_terminal("a\x1b[2Jb\x01c\x7fd\te\nf\rg\x9bh\u202ei\U000e0001") == (
        "a\\x1b[2Jb\\x01c\\x7fd\\te\\nf\\rg\\x9bh\\u202ei\\U000e0001"
    )


def test_attention_shows_control_characters_escaped(tmp_path):
    """A model whose vocabulary holds ESC, \\x01 and DEL, shown a text with them: the tokens line and the top-3
    lines show escapes, and stdout holds no control character but the line ends."""
    from data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("char", TEXT + "\x1b]0;\x07\x01\x7f")
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=16)
    save_checkpoint(
        tmp_path / "ckpt.pt",
        {
            "model": GPT(config).state_dict(),
            "model_config": config.to_dict(),
            "tokenizer": tokenizer.to_meta(),
            "step": 0,
        },
    )
    text = "\x1b\x01\x7f]0;the dog\x07 saw it"  # --query=2: the first three, each among its top 3
    code, out, err = run_sample(
        [f"--out_dir={tmp_path}", "--device=cpu", f"--attention={text}", f"--png_dir={tmp_path / 'png'}", "--query=2"]
    )
    assert code == 0, err
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", out)
    tokens = next(line for line in out.splitlines() if line.startswith("tokens: "))
    assert "\\x1b" in tokens and "\\x07" in tokens and "\\x01" in tokens and "\\x7f" in tokens
    top3 = [line for line in out.splitlines() if line.startswith("L0H")]
    assert len(top3) == 2 and all("\\x1b 0." in line and "\\x01 0." in line and "\\x7f 0." in line for line in top3)


# --- 12. what reaches TensorBoard's Markdown is shown, never rendered -------------------------------------------

PAYLOADS = [
    "the dog\n```\n<img src=https://example.org/x.png>\n**bold** [link](https://example.org)",
    "a\r<img src=x onerror=alert(1)>\r\n~~~\n<script>alert(1)</script>",
    "<div>\n\n# heading\n\n- item\n</div>",
    "    ```\n<img src=x>\n```",
    "\n\nline\\\n\tx",
]


@pytest.mark.parametrize("text", PAYLOADS)
def test_a_sample_is_shown_as_text_by_tensorboards_own_markdown(text):
    """`markdown_literal` through TensorBoard's renderer (Python-Markdown, as its text plugin configures it):
    one code block holding the text character for character, nothing after it rendered."""
    plugin_util = pytest.importorskip("tensorboard.plugin_util")
    rendered = plugin_util.markdown_to_safe_html(markdown_literal(text))
    assert rendered.startswith("<pre><code>") and rendered.endswith("</code></pre>")
    assert rendered.count("<pre>") == 1 and "<img" not in rendered and "<script" not in rendered
    shown = html.unescape(rendered[len("<pre><code>") : -len("</code></pre>")])
    assert shown == re.sub(r"\r\n?", "\n", text).expandtabs(4).rstrip("\n") + "\n"


def test_the_training_sample_goes_to_tensorboard_through_that_rule():
    from train import TextSample

    class Writer:
        def __init__(self):
            self.texts = []

        def add_text(self, tag, text, step):
            self.texts.append((tag, text))

    class Model(torch.nn.Module):
        def generate(self, idx, n, **kwargs):
            return idx

    class Trainer:
        model = Model()

    Trainer.model.register_parameter("p", torch.nn.Parameter(torch.zeros(1)))
    writer = Writer()
    tokenizer = type("Tokenizer", (), {"encode": lambda self, text: [0], "decode": lambda self, ids: PAYLOADS[0]})()
    sample = TextSample(writer, tokenizer, "x", 5, seed=1)
    sample.on_evaluate(Trainer(), type("E", (), {"step": 3})())
    assert writer.texts == [("sample", markdown_literal(PAYLOADS[0]))]


def test_a_long_text_is_read_and_tokenized_in_memory_a_small_multiple_of_its_size(tmp_path):
    """A 100 MB text of one character was refused only after 1.9 GB resident: reading it and tokenizing it piece
    by piece (data/tokenizer.py `pieces`) holds a few times the text, measured here on 24 MB in a process of its
    own."""
    path = tmp_path / "a.txt"
    path.write_bytes(b"a" * 24_000_000)
    code = (
        "import resource, sys; from common.errors import UserError; from data.prepare import prepare\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"try: prepare({str(path)!r}, 'char', data_dir={str(tmp_path / 'prep')!r}, quiet=True)\n"
        "except UserError as exc: print(exc, file=sys.stderr)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert "one kind of token only ('a', 24,000,000 times)" in run.stderr, run.stderr
    assert int(run.stdout) < 8 * 24_000_000  # 16x before


# --- 5, 6, 8. path settings: one check for every path either command takes ------------------------------------


def test_a_tilde_means_the_home_folder_in_both_commands(tmp_path, monkeypatch):
    """`files.path_setting` (every path setting of train.py and sample.py): bash leaves `~` as it is after
    `--out_dir=`, so the commands expand it themselves; nothing named `~` appears where they run."""
    from tests.commands import run_train, tiny_args

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    code, out, err = run_train(tiny_args(tmp_path, "--out_dir=~/gw", "--log_dir=~/runs"))
    assert code == 0, err
    assert (home / "gw" / "ckpt.pt").is_file() and (home / "runs" / "t").is_dir()
    assert f"checkpoint {home / 'gw' / 'ckpt.pt'}" in out and "~" not in out
    code, out, err = run_sample(["--out_dir=~/gw", "--device=cpu", "--max_new_tokens=3"])
    assert code == 0, err
    assert not (ROOT / "~").exists()


@pytest.mark.parametrize("text", ["", "a/" + "x" * 256, "x" * 300 + "/b", "é" * 128, "~nosuchuser46/x"])
@pytest.mark.parametrize("key", ["out_dir", "log_dir", "data_dir", "dataset", "init_from", "probes", "agreement"])
def test_every_path_setting_is_checked_by_one_rule(key, text):
    from common.errors import UsageError
    from common.settings import MAY_BE_EMPTY, TrainConfig

    if text == "" and key in MAY_BE_EMPTY:
        return  # the corpus's own probes; dataset and init_from refuse '' in their own words (their `check`)
    with pytest.raises(UsageError, match=f"config key '{key}' (is an empty path|has a part of|starts with '~)"):
        TrainConfig.from_keys(**{key: text})


# --- 1, 3. outputs replace only what the tool wrote; names from user text are distinct and bounded -----------


def test_images_of_different_sentences_never_share_a_file_and_a_sentence_replaces_only_its_own(
    tmp_path, checkpoint_folder
):
    """`heatmaps.sentence_slug` (every PNG's name) and `files.Mark` (every PNG and page written): sentences that
    differ only in punctuation or are written in another script get files of their own; the same sentence again
    replaces its own images and page."""
    from watch.show.heatmaps import sentence_slug

    png = tmp_path / "png"
    sentences = ["the dog.", "the dog", "the  dog", "the dog " * 3]  # one name each before: the_dog
    for sentence in sentences:
        code, _, err = run_sample([f"--out_dir={checkpoint_folder}", f"--attention={sentence}", f"--png_dir={png}"])
        assert code == 0, err
    names = sorted(p.name for p in png.iterdir())
    assert len(names) == len(sentences) * 3  # the two layers and the focused head, for every sentence
    other_scripts = ["the dog,", "Собака", "собака!", "犬", "猫", "x" * 400, "x" * 401]
    slugs = {sentence_slug(text) for text in other_scripts}
    assert len(slugs) == len(other_scripts) and max(len(slug.encode()) for slug in slugs) < 200
    before = _contents(png)
    code, _, err = run_sample([f"--out_dir={checkpoint_folder}", "--attention=the dog.", f"--png_dir={png}"])
    assert code == 0, err
    assert sorted(_contents(png)) == sorted(before)
    page = tmp_path / "page.html"
    for _ in range(2):
        code, _, err = run_sample([f"--out_dir={checkpoint_folder}", "--attention=the dog", f"--html={page}"])
        assert code == 0, err


@pytest.mark.parametrize("content", [b"<!DOCTYPE html><p>my notes</p>", b"", b"\x89PNG\r\n\x1a\n not ours"])
def test_a_file_the_tool_did_not_write_is_never_replaced_by_an_output(tmp_path, checkpoint_folder, content):
    from watch.show.heatmaps import sentence_slug

    theirs = {
        "--html": tmp_path / "mine.html",
        "--png_dir": tmp_path / "png" / f"{sentence_slug('the dog')}_layer0.png",
    }
    for option, path in theirs.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content)
        value = path if option == "--html" else path.parent
        code, _, err = run_sample([f"--out_dir={checkpoint_folder}", "--attention=the dog", f"{option}={value}"])
        assert code == 1 and "exists and is not" in err and "gptwatch replaces only files it wrote" in err, err
        assert path.read_bytes() == content


def test_a_sentence_keeps_its_whole_text_in_its_tensorboard_tag():
    from watch.show.heatmaps import sentence_tag

    texts = ["the dog.", "the dog,", "Собака", "a/b", "x" * 300, "ring\x07", "ring\\x07"]
    assert len({sentence_tag(t) for t in texts}) == len(texts)
    assert sentence_tag("the dog.") == "the dog." and sentence_tag("x" * 300) == "x" * 300
    assert "\x07" not in sentence_tag("ring\x07")


# --- 2, 7. a TensorBoard run folder holds one run; a run without a name gets one nobody else has ---------------


def test_a_new_run_never_joins_another_runs_tensorboard_lines_but_a_resume_continues_its_own(tmp_path):
    """`runtime.check_run_folder`, under the TensorBoard run's lock: a second run (another seed and out_dir) under
    the same --run_name, or inside the first one's per-head folder, is refused before it logs anything; the first
    run resumed under its own name goes on in its own folder."""
    from tests.commands import run_train, tiny_args

    code, _, err = run_train(tiny_args(tmp_path))
    assert code == 0, err
    runs = tmp_path / "runs"
    before = _contents(runs)
    for extra in (["--seed=7"], ["--seed=7", "--run_name=t/L0H0"]):
        code, _, err = run_train(tiny_args(tmp_path, f"--out_dir={tmp_path / 'second'}", *extra))
        assert code == 1 and err.count("\n") == 1 and "another run" in err, err
        assert _contents(runs) == before
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--max_iters=9"))
    assert code == 0, err
    assert len(list((runs / "t").glob("events.out.tfevents.*"))) == 2  # the run's own folder, a second file


def test_default_run_names_differ_for_runs_started_in_the_same_second(monkeypatch):
    """`runtime.default_run_name`: the time is not enough (a sweep starts its runs together); the process id
    tells the runs on one machine apart, and the name stays short whatever the config or text is called."""
    from trainer import runtime

    monkeypatch.setattr(runtime.time, "strftime", lambda fmt: "20260101-120000")
    names = set()
    for pid in (4242, 4243):
        monkeypatch.setattr(runtime.os, "getpid", lambda pid=pid: pid)
        names.add(runtime.default_run_name("pronouns"))
    assert len(names) == 2
    assert len(runtime.default_run_name("x" * 250).encode()) < 140


def test_the_run_folder_follows_its_run_when_the_project_moves(tmp_path, monkeypatch):
    """`runtime.check_run_folder`: a run folder records the id of the run that logs there, not where its files were,
    so a project trained with relative folders and then moved resumes into its own folder; another run under the
    same name is still refused there."""
    from tests.commands import run_train, tiny_args

    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.chdir(project)
    relative = ["--out_dir=out", "--log_dir=runs", "--data_dir=prep"]
    code, _, err = run_train(tiny_args(project, *relative))
    assert code == 0, err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj").rename(tmp_path / "proj2")
    monkeypatch.chdir(tmp_path / "proj2")
    code, _, err = run_train(tiny_args(tmp_path / "proj2", *relative, "--resume", "--max_iters=9"))
    assert code == 0, err
    assert len(list(Path("runs/t").glob("events.out.tfevents.*"))) == 2
    code, _, err = run_train(tiny_args(tmp_path / "proj2", *relative, "--out_dir=other"))
    assert code == 1 and "holds another run's logs" in err, err


@pytest.mark.parametrize("claim", [None, b'{"out_dir": "/a/folder/since/moved"}', b"{not json", "its own"])
def test_a_claim_is_never_stricter_than_none_for_the_run_that_logged_there(tmp_path, claim):
    """`runtime.check_run_folder`: the run that logged in a folder resumes there whatever the folder records of it,
    nothing, a claim of an older version, a damaged one or its own, when its checkpoint records the folder's name."""
    from trainer import runtime

    folder = tmp_path / "runs" / "t"
    folder.mkdir(parents=True)
    (folder / "events.out.tfevents.1.host.1.0").write_bytes(b"\0")
    if claim == "its own":
        runtime.RunFolder(folder, "ours", saved=True).record()
    elif claim is not None:
        (folder / runtime.OWNER).write_bytes(claim)
    assert runtime.check_run_folder(folder, tmp_path / "runs", "ours", recorded=True) is False
    with pytest.raises(files.UserError, match="holds another run's logs"):
        runtime.check_run_folder(folder, tmp_path / "runs", "new", recorded=False)


def test_a_start_that_saved_no_checkpoint_keeps_no_run_name(tmp_path):
    """`runtime.RunFolder`: a run records in its folder that it has saved, before its first checkpoint is written.
    A run that stopped before that (a learning rate that diverges at once, a probe file it cannot read; a kill -9
    leaves the same) left nothing to resume: the next run under its name replaces its logs, with a warning, and a run
    that had saved keeps its name."""
    from tests.commands import run_train, tiny_args

    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    for name, failing in (("lr", ["--learning_rate=1e6", "--grad_clip=0"]), ("probes", [f"--probes={bad}"])):
        args = [f"--run_name={name}", f"--out_dir={tmp_path / name}"]
        code, _, err = run_train(tiny_args(tmp_path, *args, *failing))
        assert code == 1 and "error: " in err and not (tmp_path / name / "ckpt.pt").exists(), err
        runs = tmp_path / "runs" / name
        assert next(runs.rglob("events.out.tfevents.*"), None) is not None  # its logs stay until a run replaces them
        code, _, err = run_train(tiny_args(tmp_path, *args))
        assert code == 0 and "stopped before it saved a checkpoint" in err, err
        assert len(list(runs.glob("events.out.tfevents.*"))) == 1  # the new run's alone
        code, _, err = run_train(tiny_args(tmp_path, *args, "--seed=3"))
        assert code == 1 and "holds another run's logs" in err, err


def test_a_run_that_diverged_after_saving_resumes_at_a_lower_learning_rate(tmp_path):
    """The run resumed is the same run at any learning rate: its folder records the run, not its settings."""
    from tests.commands import run_train, tiny_args

    code, _, err = run_train(tiny_args(tmp_path))
    assert code == 0, err
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--max_iters=12", "--learning_rate=1e6", "--grad_clip=0"))
    assert code == 1 and "resume from it with a lower --learning_rate" in err, err
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--max_iters=12", "--learning_rate=1e-4"))
    assert code == 0, err


# --- 9. every status line through one function ------------------------------------------------------------------

RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\x00")  # what a terminal would act on, or shows as something else


def test_status_lines_show_names_and_text_we_did_not_write_escaped(tmp_path):
    """`cli.say` (every status line of both commands): a corpus whose name and text hold ESC, BEL, a C1 control
    and the right-to-left override trains, and the settings line, `TensorBoard:`, `done:`, the page and the sample
    command show them as escapes; `--heads` and `--attention` of that run too."""
    from tests.commands import TINY, run_train

    hostile = "x\x1b]0;owned\x07\u202e\x9b"
    corpus = tmp_path / f"corpus{hostile}.txt"
    corpus.write_text(TEXT.replace("the cat", f"the {hostile} cat"))
    out = tmp_path / f"out{hostile}"
    code, stdout, stderr = run_train(
        [f"--dataset={corpus}", f"--data_dir={tmp_path / 'prep'}", f"--out_dir={out}", f"--log_dir={out}", *TINY]
    )
    assert code == 0, stderr
    assert "settings chosen for" in stdout and "done:" in stdout and "sample: python sample.py" in stdout
    for shown in (stdout, stderr):
        assert not any(c in shown for c in RAW), repr(shown)
    for look in (["--heads"], ["--attention=the dog saw the ball and it", f"--html={out / 'page.html'}"]):
        code, stdout, stderr = run_sample([f"--out_dir={out}", "--device=cpu", *look])
        assert code == 0, stderr
        assert str(out) not in stdout and not any(c in stdout + stderr for c in RAW)


# --- 10, 12. messages that point the right way ---------------------------------------------------------------------


def test_a_run_too_small_for_head_types_says_why_its_report_has_none(tmp_path):
    """`headtypes.types_not_measurable`, for the end of a run as for `sample.py --heads`; and a sample prompt the
    run chose itself (the default newline, for a text without one) never draws a warning."""
    from tests.commands import run_train, tiny_args

    (tmp_path / "corpus.txt").write_text(TEXT.replace("\n", " ") * 2)
    code, out, err = run_train(tiny_args(tmp_path, "--block_size=8", "--sample_tokens=5"))
    assert (code, err) == (0, "")
    assert "no head types: block_size 8 is below 16" in out


def test_a_resume_keeps_the_seed_its_baselines_were_drawn_from(trained, tmp_path):
    """The checkpoint's seed stays the run's (its untrained baselines are that seed's model); another is refused."""
    from tests.commands import run_train, tiny_args

    checkpoint = _trained(trained)
    checkpoint["train_config"]["seed"] = 7
    (tmp_path / "out").mkdir()
    torch.save(checkpoint, tmp_path / "out" / "ckpt.pt")
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--seed=8", "--run_name=r"))
    assert code == 2 and "seed is 8 (the checkpoint's: 7" in err and "--seed=7" in err
    code, _, err = run_train(tiny_args(tmp_path, "--resume", "--run_name=r"))
    assert code == 0, err
    assert torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["train_config"]["seed"] == 7


# --- 4. a measurement that cannot measure is never shown as a figure -------------------------------------------


def test_figures_on_identical_windows_or_indistinct_continuations_are_not_measurable(trained, tmp_path):
    """`reading.varied_windows` (every held-out window set) and `data.probes.Probe.align` (every probe's
    continuations): one token repeated gives identical windows, whose spread would be 0 by construction; a
    continuation first token both nouns share counts for neither, and a probe left without one is not scored."""
    import json

    trained.copy_to(tmp_path / "m")
    same = tmp_path / "same.txt"
    same.write_text("a" * 3000)
    code, out, err = run_sample([f"--out_dir={tmp_path / 'm'}", "--device=cpu", "--heads", f"--text={same}"])
    assert code == 0, err
    assert "only 1 different pair of 32-token windows" in out and "in-context score on held-out text" not in out
    probe = {"text": "a dog saw a ball and it ran", "pronoun": "it", "referent": "dog", "distractor": "ball"}
    for theirs, ours in ((["barked"], ["bowled"]), (["ran", "sat"], ["ran", "sat"])):
        probes = tmp_path / "probes.jsonl"
        probes.write_text(json.dumps({**probe, "continuations": theirs, "distractor_continuations": ours}) + "\n")
        code, out, err = run_sample([f"--out_dir={tmp_path / 'm'}", "--device=cpu", f"--probes={probes}", "--json"])
        assert code == 0 and "not measurable" in err
        continuation = json.loads(out)["continuation"]
        assert continuation["n"] == 0 and continuation["logit_diff"] is None


@pytest.mark.parametrize(
    ("which", "text", "pairs"),
    [("char", "ab" * 3000, 2), ("char", "abc" * 2000, 3), ("gpt2", " dog cat" * 1000, 2), ("gpt2", " the" * 3000, 1)],
)
def test_a_text_that_repeats_itself_is_a_few_windows_and_gets_no_spread(trained, tmp_path, which, text, pairs):
    """`probesets.held_out_text` draws each pair of windows once, and `reading.varied_windows` measures nothing on
    fewer pairs than a spread needs: the 256 places drawn in a periodic text are its period's few windows, over
    which any spread is 0.000 by construction. Characters or BPE tokens alike."""
    trained.copy_to(tmp_path / "m", which)
    path = tmp_path / "periodic.txt"
    path.write_text(text)
    code, out, err = run_sample([f"--out_dir={tmp_path / 'm'}", "--device=cpu", "--heads", f"--text={path}"])
    assert code == 0, err
    assert f"only {pairs} different pair" in out and "fewer than the 10 a spread needs" in out, out
    assert "in-context score on held-out text" not in out and not re.search(r"± 0\.0+\b", out)  # no spread of 0


def test_a_run_on_a_text_that_repeats_itself_reports_no_figure_without_a_spread(tmp_path):
    """The end of training reads the val split through the same check: a corpus of 'ab' repeated is two windows."""
    from tests.commands import run_train, tiny_args

    (tmp_path / "corpus.txt").write_text("ab" * 3000)
    code, out, err = run_train(tiny_args(tmp_path))
    assert code == 0, err
    assert "only 2 different pairs of 32-token windows can be drawn from the val split" in out, out
    assert "in-context score on held-out text" not in out and not re.search(r"± 0\.0+\b", out)  # no spread of 0


# --- 11. nothing read that would block, and a bound on what is read ----------------------------------------------


def test_a_pipe_planted_where_the_tool_reads_its_own_files_is_never_opened(tmp_path):
    """The files a command reads that it wrote itself (a run folder's owner, an export's marker) are checked to be
    regular files first, as every file a user names is (`files.regular_file`): opening a pipe would wait forever."""
    from common.files import read_record
    from formats.huggingface import MARKER, is_earlier_export
    from trainer import runtime

    os.mkfifo(tmp_path / runtime.OWNER)
    os.mkfifo(tmp_path / MARKER)
    assert read_record(tmp_path / runtime.OWNER) == {}  # returns at once: a blocked open would hang the test
    assert not is_earlier_export(tmp_path)


def test_a_checkpoint_recorded_with_an_empty_folder_still_reads(trained, tmp_path):
    """Before empty paths were refused, `--out_dir=` trained into the current folder and recorded ''; such a
    checkpoint's settings read '' as that folder, '.'."""
    checkpoint = _trained(trained)
    checkpoint["train_config"].update(out_dir="", log_dir="")
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    code, _, err = run_sample([f"--out_dir={tmp_path}", "--device=cpu", "--max_new_tokens=3"])
    assert code == 0, err
