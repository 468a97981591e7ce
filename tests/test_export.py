"""`--export` without the optional libraries, and what needs none of them: the project never imports
transformer-lens or transformers until an export runs; without them an export is one line saying
what to install; the refusals; which paths an export may write to."""

import subprocess
import sys
import types

import pytest

from formats.export import Unsupported, check_path
from formats.sources import TARGETS
from model.config import GPTConfig
from tests.commands import PATIENCE, ROOT, one_line, run_sample
from tests.random_checkpoints import make_checkpoint

HEAVY = ("transformer_lens", "transformers", "tokenizers")


def test_importing_the_project_imports_neither_library():
    modules = [
        "sample",
        "train",
        "formats",
        "formats.export",
        "formats.layout",
        "formats.transformerlens",
        "formats.huggingface",
        "watch.inspect",
    ]
    code = f"import sys; import {', '.join(modules)}; print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=PATIENCE
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("target, package", [("tl", "transformer_lens"), ("hf", "transformers")])
def test_without_the_library_an_export_is_one_line_naming_what_to_install(tmp_path, monkeypatch, target, package):
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed (an import of it fails)
    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    code, out, err = run_sample([f"--out_dir={folder}", "--export", target, str(tmp_path / "export")])
    assert code == 1 and out == ""
    assert "pip install -r requirements-interop.txt" in one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # nothing written


def test_transformer_lens_4_is_named_as_the_wrong_version(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_lens", types.ModuleType("transformer_lens"))  # no HookedTransformer
    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    code, _, err = run_sample([f"--out_dir={folder}", "--export", "tl", str(tmp_path / "m.pt")])
    assert code == 1 and "transformer-lens 3.x" in one_line(err) and "4.0 removed it" in err


def refusal(config: GPTConfig, target: str) -> str | None:
    """`check_supported`'s line refusing a model of `config` for `target`; None when it goes there."""
    try:
        TARGETS[target].check_supported(config)
    except Unsupported as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
@pytest.mark.parametrize("bias", [False, True])
def test_only_a_modern_model_with_biases_is_refused_and_only_by_hugging_face(arch, bias):
    config = GPTConfig(vocab_size=50, arch=arch, bias=bias)
    assert refusal(config, "tl") is None
    why = refusal(config, "hf")
    assert (why is not None) == (arch == "modern" and bias)
    if why is not None:
        assert "\n" not in why and "c_fc, c_proj" in why and "out_proj" in why


@pytest.mark.parametrize(
    "target, has",
    [
        ("tl", "learned absolute, rotary, shortformer and ALiBi positions"),
        ("hf", "GPT-2's learned position table and Qwen3's rotary positions"),
    ],
)
def test_relative_positions_are_refused_by_both_targets_naming_the_part(tmp_path, target, has):
    assert refusal(GPTConfig(vocab_size=50, attn_only=True), target) is None  # attention alone goes to both
    why = refusal(GPTConfig(vocab_size=50, relative_positions=True), target)
    assert "\n" not in why and "relative_positions=true" in why and has in why
    assert "train with --relative_positions=false" in why
    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char", relative_positions=True)
    code, out, err = run_sample([f"--out_dir={folder}", "--export", target, str(tmp_path / "export")])
    assert code == 1 and out == "" and one_line(err) == f"error: {why}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # nothing written


def test_which_paths_an_export_may_take(tmp_path):
    from common.errors import UserError

    tl, hf = TARGETS["tl"], TARGETS["hf"]
    check_path(tmp_path / "new" / "model.tl.pt", tl)  # a new file in a folder that can be made
    check_path(tmp_path / "folder", hf)  # a new folder
    (tmp_path / "empty").mkdir()
    check_path(tmp_path / "empty", hf)  # an empty one
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    (tmp_path / "file.txt").write_text("mine")
    for target, path, words in (
        ("hf", tmp_path / "full", "not empty"),
        ("hf", tmp_path / "file.txt", "is a file"),
        ("tl", tmp_path / "file.txt", "not an --export tl file written earlier"),
        ("tl", tmp_path / "full", "is a directory"),
        ("tl", tmp_path / "file.txt" / "m.pt", "cannot write"),
    ):
        with pytest.raises(UserError, match=words):
            check_path(path, TARGETS[target])
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine" and (tmp_path / "file.txt").read_text() == "mine"
