"""Every bad input gets one line on stderr that names the problem and the fix,
a non-zero exit (2: command line or config, 1: data, checkpoints, files), no
traceback (`--debug` shows one), and leaves existing files untouched.

The table below is also the table of docs/errors.md, with each message exactly
as printed: `python tests/test_bad_input.py --write` refreshes it there.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest
import torch

from tests.cli import ROOT, one_line, run, tiny_args

DOC = ROOT / "docs" / "errors.md"
START, END = "<!-- cases:start -->", "<!-- cases:end -->"


class Workspace:
    """A folder with a corpus, a config and a trained checkpoint in out/ (char) and gpt2/ (GPT-2 BPE)."""

    def __init__(self, root: Path, references: Path) -> None:
        self.root = root
        self.out = root / "out"
        for name in ("out", "gpt2"):
            (root / name).mkdir()
            shutil.copy(references / name / "ckpt.pt", root / name / "ckpt.pt")

    def train(self, *extra: str, config: str | None = None) -> list[str]:
        args = tiny_args(self.root, *extra)
        if config is not None:
            args[0] = config
        return args

    def sample(self, *extra: str, out: Path | str | None = None) -> list[str]:
        return [f"--out_dir={out or self.out}", "--max_new_tokens=5", "--device=cpu", *extra]

    def file(self, name: str, content: str | bytes) -> str:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def checkpoint(self, folder: str, damage: Callable[[Path, bytes], None]) -> Path:
        """A folder whose ckpt.pt is the trained one after `damage(path, good_bytes)`."""
        path = self.root / folder / "ckpt.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        damage(path, (self.out / "ckpt.pt").read_bytes())
        return path.parent


def train_references(folder: Path) -> Path:
    """Tiny trained checkpoints the cases copy: folder/out (char) and folder/gpt2."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, extra in (("out", []), ("gpt2", ["--tokenizer=gpt2"])):
        code, _, err = run("train", tiny_args(folder, f"--out_dir={folder / name}", "--max_iters=2", *extra))
        assert code == 0, err
    return folder


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


def _disk_full(mp: pytest.MonkeyPatch) -> None:
    def save(obj, fh, *args, **kwargs):
        fh.write(b"PK\x03\x04 part of a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    mp.setattr("trainer.checkpoint.torch.save", save)


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


CASES = [
    # --- data -------------------------------------------------------------------------------------------
    Case("data-missing", "dataset file does not exist", "train",
         lambda w: w.train(f"--dataset={w.root / 'missing.txt'}"), 1,
         ("neither a corpus name nor an existing file", "pronouns, shakespeare, tinystories")),
    Case("data-unknown-corpus", "dataset is not a corpus name (typo)", "train",
         lambda w: w.train("--dataset=shakespear"), 1, ("did you mean 'shakespeare'",)),
    Case("data-directory", "dataset is a directory", "train",
         lambda w: w.train(f"--dataset={w.root}"), 1, ("is a directory",)),
    Case("data-empty", "dataset file is empty", "train",
         lambda w: w.train(f"--dataset={w.file('empty.txt', '')}"), 1, ("is empty",)),
    Case("data-not-utf8", "dataset file is not UTF-8 (Latin-1)", "train",
         lambda w: w.train(f"--dataset={w.file('latin1.txt', 'café au lait '.encode('latin-1') * 50)}"), 1,
         ("not UTF-8", "offset 3", "iconv")),
    Case("data-too-short", "text shorter than block_size + 2 tokens", "train",
         lambda w: w.train(f"--dataset={w.file('short.txt', 'the dog saw the cat')}"), 1,
         ("fewer than block_size + 2 = 18", "--block_size")),
    # --- config -------------------------------------------------------------------------------------------
    Case("cli-unknown-key", "unknown key on the command line", "train",
         lambda w: w.train("--n_layers=2"), 2, ("unknown config key 'n_layers'", "did you mean 'n_layer'")),
    Case("toml-unknown-key", "unknown key in the TOML file", "train",
         lambda w: w.train(config=w.file("c.toml", "learning_rat = 0.01\n")), 2,
         ("unknown config key 'learning_rat'", "did you mean 'learning_rate'")),
    Case("cli-wrong-type", "wrong type on the command line", "train",
         lambda w: w.train("--n_layer=two"), 2, ("'n_layer'", "must be an integer", "'two'")),
    Case("toml-wrong-type", "wrong type in the TOML file", "train",
         lambda w: w.train(config=w.file("c.toml", 'n_layer = "4"\n')), 2, ("'n_layer'", "must be an integer")),
    Case("cli-bad-bool", "a boolean that is not true/false", "train",
         lambda w: w.train("--compile=maybe"), 2, ("'compile'", "true or false")),
    Case("cli-missing-equals", "`--key value` instead of `--key=value`", "train",
         lambda w: w.train("--n_layer", "2"), 2, ("write --n_layer=2",)),
    Case("size-zero", "a zero size", "train",
         lambda w: w.train("--n_layer=0"), 2, ("'n_layer' must be a positive integer",)),
    Case("size-negative", "a negative size", "train",
         lambda w: w.train("--batch_size=-4"), 2, ("'batch_size' must be a positive integer",)),
    Case("block-size-zero", "block_size 0", "train",
         lambda w: w.train("--block_size=0"), 2, ("'block_size' must be a positive integer",)),
    Case("n-embd-indivisible", "n_embd not divisible by n_head", "train",
         lambda w: w.train("--n_embd=15"), 2, ("'n_embd' must be a multiple of 'n_head' (2)", "use 16")),
    Case("unknown-tokenizer", "unknown tokenizer", "train",
         lambda w: w.train("--tokenizer=bpe"), 2, ("'tokenizer' must be one of char, gpt2",)),
    Case("not-finite", "a number that is nan or inf", "train",
         lambda w: w.train("--learning_rate=nan"), 2, ("'learning_rate' must be a finite number",)),
    Case("val-fraction", "val_fraction outside (0, 1)", "train",
         lambda w: w.train("--val_fraction=1.5"), 2, ("'val_fraction' must be between 0 and 1",)),
    Case("seed-out-of-range", "a seed no generator accepts", "train",
         lambda w: w.train("--seed=99999999999999999999"), 2, ("'seed' must be between 0 and 2**32 - 1",)),
    Case("threads-too-many", "more threads than CPUs", "train",
         lambda w: w.train("--threads=100000"), 2, ("--threads=100000 but this machine has",), exact=False),
    Case("watch-interval-negative", "a negative watch_interval", "train",
         lambda w: w.train("--watch_interval=-5"), 2, ("'watch_interval' must be >= 0",)),
    Case("toml-malformed", "malformed TOML", "train",
         lambda w: w.train(config=w.file("c.toml", "n_layer = 2\nn_head = = 3\n")), 2,
         ("not valid TOML", "line 2", "fix the syntax")),
    Case("toml-table", "a [table] in the TOML file", "train",
         lambda w: w.train(config=w.file("c.toml", "[model]\nn_layer = 2\n")), 2, ("keys are flat",)),
    Case("toml-missing", "config file does not exist", "train",
         lambda w: w.train(config=str(w.root / "nope.toml")), 2, ("nope.toml not found",)),
    Case("two-configs", "two config files", "train",
         lambda w: w.train(w.file("other.toml", "")), 2, ("at most one config file",)),
    # --- checkpoints (train --resume) -----------------------------------------------------------------------
    Case("resume-missing", "--resume without a checkpoint", "train",
         lambda w: w.train("--resume", f"--out_dir={w.root / 'empty'}"), 1,
         ("--resume but there is no checkpoint", "drop --resume")),
    Case("resume-truncated", "--resume from a truncated checkpoint", "train",
         lambda w: w.train("--resume", f"--out_dir={w.checkpoint('cut', _truncate)}"), 1,
         ("not a readable checkpoint", "truncated")),
    Case("resume-not-checkpoint", "--resume from a file that is not a checkpoint", "train",
         lambda w: w.train("--resume", f"--out_dir={w.checkpoint('junk', _random_bytes)}"), 1,
         ("not a checkpoint written by this trainer",)),
    Case("resume-plain-tensor", "--resume from a torch file holding a plain tensor", "train",
         lambda w: w.train("--resume", f"--out_dir={w.checkpoint('tensor', _plain_tensor)}"), 1,
         ("not a checkpoint written by this trainer",)),
    Case("resume-pickled-object", "--resume from a checkpoint with a pickled object", "train",
         lambda w: w.train("--resume", f"--out_dir={w.checkpoint('pickled', _pickled)}"), 1,
         ("refusing", "pickled Python object (argparse.Namespace)")),
    Case("resume-other-version", "--resume from another checkpoint format version", "train",
         lambda w: w.train("--resume", f"--out_dir={w.checkpoint('v99', _other_version)}"), 1,
         ("format version 99",)),
    Case("resume-larger-block", "--resume with a block_size beyond the checkpoint's", "train",
         lambda w: w.train("--resume", "--block_size=32"), 2,
         ("--block_size=32 is larger than the 16", "--block_size=16")),
    Case("resume-other-model", "--resume with another model shape", "train",
         lambda w: w.train("--resume", "--n_layer=2"), 2, ("'n_layer' is 2 but the checkpoint was trained with 1",)),
    Case("resume-other-optimizer", "--resume with another optimizer", "train",
         lambda w: w.train("--resume", "--optimizer=muon"), 2,
         ("'optimizer' is 'muon' but the checkpoint was trained with 'adamw'",)),
    Case("resume-other-vocabulary", "--resume with another tokenizer", "train",
         lambda w: w.train("--resume", "--tokenizer=gpt2"), 2, ("vocabulary does not match",)),
    # --- sampling -----------------------------------------------------------------------------------------------
    Case("sample-empty-prompt", "empty prompt", "sample",
         lambda w: w.sample("--prompt="), 2, ("prompt is empty",)),
    Case("sample-unknown-chars", "prompt characters outside the vocabulary", "sample",
         lambda w: w.sample("--prompt=THE DOG"), 1, ("not in the char vocabulary", "'D', 'E', 'G'")),
    Case("sample-unknown-tokens", "prompt tokens outside the vocabulary (gpt2)", "sample",
         lambda w: w.sample("--prompt=the xylophone", out=w.root / "gpt2"), 1,
         ("never seen in the training corpus", "'ophone'")),
    Case("sample-zero-tokens", "--max_new_tokens=0", "sample",
         lambda w: w.sample("--max_new_tokens=0"), 2, ("--max_new_tokens must be positive",)),
    Case("sample-negative-tokens", "--max_new_tokens negative", "sample",
         lambda w: w.sample("--max_new_tokens=-5"), 2, ("--max_new_tokens must be positive",)),
    Case("sample-negative-temperature", "negative temperature", "sample",
         lambda w: w.sample("--temperature=-1"), 2, ("--temperature must be a number >= 0",)),
    Case("sample-nan-temperature", "temperature nan", "sample",
         lambda w: w.sample("--temperature=nan"), 2, ("--temperature must be a number >= 0",)),
    Case("sample-top-k-zero", "--top_k=0", "sample",
         lambda w: w.sample("--top_k=0"), 2, ("--top_k must be between 1 and the vocabulary size",)),
    Case("sample-top-k-too-big", "--top_k larger than the vocabulary", "sample",
         lambda w: w.sample("--top_k=1000"), 2, ("--top_k must be between 1 and the vocabulary size",)),
    Case("sample-top-p-zero", "--top_p=0", "sample",
         lambda w: w.sample("--top_p=0"), 2, ("--top_p must be in (0, 1]",)),
    Case("sample-top-p-big", "--top_p above 1", "sample",
         lambda w: w.sample("--top_p=1.5"), 2, ("--top_p must be in (0, 1]",)),
    Case("sample-seed-out-of-range", "a seed no generator accepts", "sample",
         lambda w: w.sample("--seed=-1"), 2, ("--seed must be between 0 and 2**32 - 1",)),
    Case("sample-prompt-file-missing", "missing prompt file", "sample",
         lambda w: w.sample(f"--prompt=@{w.root / 'prompt.txt'}"), 2, ("prompt file", "not found")),
    Case("sample-unknown-flag", "unknown flag", "sample",
         lambda w: w.sample("--topk=3"), 2, ("unrecognized arguments: --topk=3", "--help")),
    Case("sample-wrong-type", "a flag value of the wrong type", "sample",
         lambda w: w.sample("--max_new_tokens=ten"), 2, ("invalid int value: 'ten'",)),
    Case("sample-html-alone", "--html without --attention", "sample",
         lambda w: w.sample("--html=page.html"), 2, ("--html needs --attention TEXT",)),
    Case("sample-no-checkpoint", "no checkpoint in --out_dir", "sample",
         lambda w: w.sample(out=w.root / "nothing"), 1, ("no checkpoint at",)),
    Case("sample-truncated", "truncated checkpoint", "sample",
         lambda w: w.sample(out=w.checkpoint("cut", _truncate)), 1, ("not a readable checkpoint",)),
    Case("sample-pickled-object", "checkpoint with a pickled object", "sample",
         lambda w: w.sample(out=w.checkpoint("pickled", _pickled)), 1, ("refusing", "pickled Python object")),
    # --- files ---------------------------------------------------------------------------------------------------
    Case("out-dir-unwritable", "out_dir under a regular file", "train",
         lambda w: w.train(f"--out_dir={w.file('a-file', 'x')}/out"), 1,
         ("cannot write to out_dir", "choose a writable --out_dir")),
    Case("log-dir-unwritable", "log_dir under a regular file", "train",
         lambda w: w.train(f"--log_dir={w.file('a-file', 'x')}/runs"), 1,
         ("cannot write to log_dir", "choose a writable --log_dir")),
    Case("data-dir-unwritable", "data_dir under a regular file", "train",
         lambda w: w.train(f"--data_dir={w.file('a-file', 'x')}/prep"), 1,
         ("cannot write prepared data", "--data_dir")),
    Case("html-unwritable", "--html under a regular file", "sample",
         lambda w: w.sample("--attention=the dog and it", f"--html={w.file('a-file', 'x')}/page.html"), 1,
         ("cannot write the attention page", "a-file/page.html", "choose a writable path")),
    Case("disk-full", "disk full while saving a checkpoint (simulated)", "train",
         lambda w: w.train(), 1,
         ("No space left on device", "previous checkpoint is intact", "free disk space"), patch=_disk_full),
    # --- training ---------------------------------------------------------------------------------------------
    Case("diverged", "loss becomes nan or inf (--learning_rate=1e6)", "train",
         lambda w: w.train("--learning_rate=1e6"), 1,
         ("at step", "training stopped", "try a lower --learning_rate (now 1e+06)"), exact=False),
]
SUBPROCESS = ("cli-unknown-key", "sample-top-p-big")  # the same, through a real process


def run_case(case: Case, root: Path, references: Path, subprocess_: bool = False) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the case run in `root`, checking that existing files are untouched."""
    ws = Workspace(root, references)
    args = case.args(ws)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.MonkeyPatch.context() as mp:
        if case.patch:
            case.patch(mp)
        code, out, err = run(case.program, args, subprocess_=subprocess_)
    changed = [str(p) for p, data in before.items() if not p.is_file() or p.read_bytes() != data]
    assert not changed, f"{case.id} changed existing files: {changed}"
    return code, out, err


def shown(err: str, root: Path) -> str:
    """The message as docs/errors.md shows it: without 'error: ', with the temporary folder as TMP."""
    return err.removeprefix("error: ").rstrip("\n").replace(str(root), "TMP")


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> Path:
    return train_references(tmp_path_factory.mktemp("references"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_one_clear_line(case, references, tmp_path):
    code, _, err = run_case(case, tmp_path, references)
    message = one_line(err)
    assert code == case.code, message
    for word in case.words:
        assert word in message, f"{word!r} missing from: {message}"
    documented = doc_rows().get(case.id)
    assert documented is not None and (documented == shown(err, tmp_path) or not case.exact), (
        f"docs/errors.md is out of date for {case.id}; run: python tests/test_bad_input.py --write")


@pytest.mark.parametrize("case_id", SUBPROCESS)
def test_real_process_prints_one_line_and_exits(case_id, references, tmp_path):
    case = next(c for c in CASES if c.id == case_id)
    code, _, err = run_case(case, tmp_path, references, subprocess_=True)
    assert code == case.code and "Traceback" not in err
    assert one_line(err).removeprefix("error: ").rstrip("\n") == doc_rows()[case.id].replace("TMP", str(tmp_path))


def test_debug_lets_the_exception_and_its_traceback_through(tmp_path):
    import sample
    import train
    from errors import UsageError, UserError, run_cli

    with pytest.raises(UsageError, match="'n_layer' must be a positive integer"):
        run_cli(train.main, [*tiny_args(tmp_path, "--n_layer=0"), "--debug"])
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café ".encode("latin-1") * 50)
    with pytest.raises(UserError, match="not UTF-8"):
        run_cli(train.main, [*tiny_args(tmp_path, f"--dataset={latin1}"), "--debug"])
    with pytest.raises(UserError, match="no checkpoint at"):
        run_cli(sample.main, ["--debug", f"--out_dir={tmp_path / 'nothing'}"])


def test_every_case_is_documented():
    assert sorted(doc_rows()) == sorted(c.id for c in CASES)


# --- docs/errors.md ---------------------------------------------------------------------------------------

def doc_rows() -> dict[str, str]:
    """{case id: message} from the table in docs/errors.md."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").split(START)[1].split(END)[0].splitlines():
        match = re.match(r"\| `([\w-]+)` \|.*\| `` (.*) `` \|$", line)
        if match:
            rows[match[1]] = match[2].replace("\\|", "|")
    return rows


def doc_table() -> str:
    """Runs every case and returns the markdown table of what it printed."""
    lines = ["| case | bad input | program | exit | message (stderr, after `error: `) |",
             "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        references = train_references(Path(tmp) / "references")
        for case in CASES:
            root = Path(tmp) / case.id
            root.mkdir()
            code, _, err = run_case(case, root, references)
            assert code == case.code, (case.id, err)
            message = shown(err, root).replace("|", "\\|")
            lines.append(f"| `{case.id}` | {case.problem} | {case.program}.py | {code} | `` {message} `` |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.chdir(ROOT)
    table = doc_table()
    if "--write" in sys.argv:
        head, rest = DOC.read_text(encoding="utf-8").split(START)
        DOC.write_text(f"{head}{START}\n{table}\n{END}{rest.split(END)[1]}", encoding="utf-8")
        print(f"updated {DOC}")
    else:
        print(table)
