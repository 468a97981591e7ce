"""Everything a command writes goes through one writer (`common.files.write_files`, `Kind`): a file is replaced only
when it bears the header its writer put at a fixed place; names hold all that makes an output different; the same
rule says where pictures go in every mode; a failed write leaves no folder; long work says how far it has got."""

from __future__ import annotations

import io
import json
import re
import struct
import zlib
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np
import pytest

from common.cli import progress
from common.errors import UserError
from common.files import write_files
from formats.checkpoint import CHECKPOINT_FILE, save_checkpoint
from tests.commands import ROOT, one_line, run_sample, run_train, tiny_args
from tests.random_checkpoints import make_checkpoint
from trainer.runtime import LOCK
from watch.show.heatmaps import PNG, png_of
from watch.show.page import PAGE, write_page


@pytest.fixture(scope="module")
def checkpoint_folder(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"), "gpt2-char")


# --- whose a file is: its header, at its fixed place, never a search ----------------------------------------------


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_each_kind_knows_its_own_files_by_the_header_at_its_place_not_by_what_they_mention(tmp_path):
    image = png_of(np.zeros((2, 2, 3), dtype=np.uint8))
    [png] = write_files({tmp_path / "ours.png": image}, PNG, "the heatmap", "--png_dir")
    page = write_page(tmp_path / "ours.html", "<p>")
    save_checkpoint(tmp_path / "ours.pt", {"model": {}, "step": 0})
    for kind, ours in ((PNG, png), (PAGE, page), (CHECKPOINT_FILE, tmp_path / "ours.pt")):
        assert kind.bears(ours.read_bytes())
    header = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
    text = _chunk(b"tEXt", b"Software\x00gptwatch")
    assert PNG.bears(header + text + _chunk(b"IDAT", b""))
    not_ours = {
        PNG: [
            header + _chunk(b"IDAT", b"") + text,  # after the pixels: not where a writer of ours puts it
            header + _chunk(b"zTXt", b"notes: tEXtSoftware\x00gptwatch"),  # inside another chunk
            b"my notes on PNGs: " + header + text,
        ],
        PAGE: [
            (ROOT / "watch" / "show" / "page.py").read_bytes(),  # the project's source defines the header
            (ROOT / "watch" / "show" / "page.html").read_bytes(),  # the page's template
            b"<!DOCTYPE html>\n" + PAGE.header,
        ],
        CHECKPOINT_FILE: [
            b"my notes: the gptwatch-checkpoint format, format_version 1\n",
            (ROOT / "formats" / "checkpoint.py").read_bytes(),
        ],
        LOCK: [b"", b'{"note": "my own lock", "gptwatch": "run lock"}', b" " + LOCK.header],
    }
    for kind, files in not_ours.items():
        for content in files:
            path = tmp_path / "theirs"
            path.write_bytes(content)
            assert not kind.bears(content)
            with pytest.raises(UserError, match="exists and is not .* left as it is"):
                kind.check(path, "choose another path")
            assert path.read_bytes() == content


def test_html_never_replaces_the_projects_own_source(checkpoint_folder, tmp_path):
    """`--html watch/show/page.py`: refused, and the file is as it was (run on a copy, in case it were not)."""
    source = tmp_path / "page.py"
    source.write_bytes((ROOT / "watch" / "show" / "page.py").read_bytes())
    code, _, err = run_sample([f"--out_dir={checkpoint_folder}", "--attention=the dog saw it", f"--html={source}"])
    assert code == 1 and "page.py exists and is not an attention page" in one_line(err)
    assert source.read_bytes() == (ROOT / "watch" / "show" / "page.py").read_bytes()


# --- names hold all that makes an output different ----------------------------------------------------------------


def test_pairs_that_share_a_clean_prompt_never_share_a_heatmap(checkpoint_folder, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pair = {"clean": "the dog saw it", "corrupted": "the log saw it", "answer": "a", "wrong": "e"}
    # Two more with the same clean prompt: another corrupted one, another wrong answer (each measured: a pair the model
    # does not tell apart has no map).
    others = [{**pair, "corrupted": "the dot saw it"}, {**pair, "wrong": "i"}]
    pairs.write_text("".join(json.dumps(p) + "\n" for p in (pair, *others)))
    maps = tmp_path / "maps"
    code, out, err = run_sample([f"--out_dir={checkpoint_folder}", "--patch", str(pairs), f"--png_dir={maps}"])
    assert code == 0, err
    shown = re.findall(r"^heatmap: (.*)$", out, re.M)
    assert len(shown) == len(set(shown)) == 3 and sorted(map(str, maps.iterdir())) == sorted(shown)
    code, out, err = run_sample(
        [f"--out_dir={checkpoint_folder}", "--patch", pair["clean"], "the bog saw it", f"--png_dir={maps}"]
    )
    assert code == 0, err
    assert len(list(maps.iterdir())) == 4  # a fourth pair of the same clean prompt: a fourth map


def test_ablated_attention_goes_to_files_and_tensorboard_tags_that_name_the_heads_removed(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert run_train(tiny_args(tmp_path, "--n_layer=2"))[0] == 0
    png = tmp_path / "png"
    looks = {"intact": [], "ablated": ["--ablate=L0H0", "--ablate=L1H1"]}
    printed = {}
    for name, ablate in looks.items():
        code, out, err = run_sample(
            [f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--attention=the dog saw it", f"--png_dir={png}", *ablate]
        )
        assert code == 0, err
        printed[name] = re.search(r"^heatmaps: (.*)$", out, re.M)[1]
    assert "_without_L0H0_L1H1_" in printed["ablated"] and "without" not in printed["intact"]
    names = sorted(p.name for p in png.iterdir())
    assert len(names) == 2 * 3 and sum("_without_L0H0_L1H1_" in n for n in names) == 3
    tags = {
        tag
        for events in (tmp_path / "runs" / "t").glob("events.out.tfevents.*")
        for tag in EventAccumulator(str(events), size_guidance={"images": 0}).Reload().Tags()["images"]
    }
    inspected = sorted(tag for tag in tags if tag.startswith("inspect/"))
    assert len(inspected) == 6 and len({tag.rsplit("/", 1)[0] for tag in inspected}) == 2
    assert sum(tag.startswith("inspect/the dog saw it without L0H0 L1H1/") for tag in inspected) == 3


# --- one rule for where pictures go, in every mode ----------------------------------------------------------------


@pytest.mark.parametrize(
    "look",
    [["--patch", "the dog saw it", "the log saw it"], ["--attention=the dog saw it"]],
    ids=["patch", "attention"],
)
def test_json_writes_pictures_only_where_png_dir_names_them(checkpoint_folder, tmp_path, look):
    """--json prints JSON alone on stdout; --png_dir with it is never ignored: the PNGs go there, and stderr says
    where. Without --png_dir, --json writes no file and makes no folder."""
    code, out, err = run_sample([f"--out_dir={checkpoint_folder}", *look, "--json", f"--png_dir={tmp_path / 'pj'}"])
    assert code == 0, err
    json.loads(out)
    assert sorted(p.suffix for p in (tmp_path / "pj").iterdir()) == [".png"] * (1 if "--patch" in look else 3)
    assert err.startswith("heatmap") and str(tmp_path / "pj") in err
    before = sorted(p.name for p in checkpoint_folder.iterdir())
    code, out, err = run_sample([f"--out_dir={checkpoint_folder}", *look, "--json"])
    assert code == 0 and err == "" and sorted(p.name for p in checkpoint_folder.iterdir()) == before


def test_the_patching_heatmap_path_is_shown_escaped(checkpoint_folder, tmp_path):
    hostile = tmp_path / "pe\x1b[2J\x07"
    code, out, err = run_sample(
        [f"--out_dir={checkpoint_folder}", "--patch", "the dog saw it", "the log saw it", f"--png_dir={hostile}"]
    )
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "heatmap: " + str(tmp_path / "pe\\x1b[2J\\x07") in out


# --- a failed write leaves no folder behind -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "look",
    [
        ["--patch", "the dog saw it", "the log saw it", "--png_dir={new}/maps"],
        ["--attention=the dog saw it", "--png_dir={new}/png"],
        ["--attention=the dog saw it", "--html={new}/pages/page.html"],
    ],
    ids=["patch", "attention", "html"],
)
def test_a_look_whose_write_fails_leaves_no_folder_behind(checkpoint_folder, tmp_path, monkeypatch, look):
    import errno
    import os

    from common import files

    def full(path, write, before_replace=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "replace_file", full)
    new = tmp_path / "new"
    code, _, err = run_sample([f"--out_dir={checkpoint_folder}", *(a.format(new=new) for a in look)])
    assert code == 1 and "No space left on device" in one_line(err)
    assert not new.exists()


# --- long work says how far it has got ----------------------------------------------------------------------------


def test_progress_is_silent_for_quick_work_and_speaks_once_work_runs_long(monkeypatch):
    monkeypatch.setattr("common.cli.PROGRESS_AFTER", 2.0)
    now = [0.0]
    err = io.StringIO()
    with redirect_stderr(err):
        assert list(progress(range(3), "quick", clock=lambda: now[0])) == [0, 1, 2]
    assert err.getvalue() == ""
    with redirect_stderr(err):
        for _ in progress(range(4), "patching 4 pairs \x1b[2J", clock=lambda: now[0]):
            now[0] += 1.0  # each item a second
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines  # after two seconds, once: the next is a minute on
    assert re.fullmatch(r"patching 4 pairs \\x1b\[2J: [12] of 4 done in 2 s, about \d s left", lines[0])


def test_a_pairs_file_says_how_far_patching_has_got(checkpoint_folder, tmp_path, monkeypatch):
    """--patch FILE goes through `progress` (here with no wait before the first word): a line on stderr, the JSON
    alone on stdout."""
    monkeypatch.setattr("common.cli.PROGRESS_AFTER", 0.0)
    pairs = tmp_path / "pairs.jsonl"
    pair = {"clean": "the dog saw it", "corrupted": "the log saw it", "answer": "a", "wrong": "e"}
    pairs.write_text("".join(json.dumps({**pair, "wrong": wrong}) + "\n" for wrong in "eoi"))
    code, out, err = run_sample([f"--out_dir={checkpoint_folder}", "--patch", str(pairs), "--json"])
    assert code == 0 and len(json.loads(out)["pairs"]) == 3
    assert re.match(r"patching 3 pairs: [012] of 3 done in \d+ s", err), err
