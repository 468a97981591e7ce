"""One table per layout (formats/layout.py) serves both ways: what is read back from what was written is the
model's own weights, for every layout and configuration it holds. No optional library is needed: the tables
are plain tensors. (The libraries themselves load what is written: tests/test_interop_*.py.)"""

from __future__ import annotations

import pytest
import torch

from formats import load_model
from formats.checkpoint import save_checkpoint
from formats.layout import HEAD, gpt2_layout, hooked_layout, qwen3_layout, read_back, read_weights, written
from model.config import GPTConfig
from model.gpt import GPT

SIZES = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=16)


def _model(**options) -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SIZES, **options))
    with torch.no_grad():  # no parameter left at a value its layout could make up (a bias of 0, a weight of 1)
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    return model


def _round_trip(rows, model: GPT) -> dict[str, torch.Tensor]:
    return read_back(rows, written(rows, model.state_dict()).__getitem__)


@pytest.mark.parametrize(
    "layout, options",
    [
        (lambda c: gpt2_layout(c), dict(bias=True, qkv_bias=True)),  # Hugging Face's GPT-2
        (lambda c: gpt2_layout(c), dict(bias=True, qkv_bias=True, activation="gelu_tanh")),
        (lambda c: gpt2_layout(c, conv1d=False), dict()),  # nanoGPT's, without biases
        (lambda c: gpt2_layout(c, conv1d=False), dict(bias=True, qkv_bias=True)),
        (hooked_layout, dict()),
        (hooked_layout, dict(bias=True, qkv_bias=True)),
        (hooked_layout, dict(attn_only=True)),
        (hooked_layout, dict(arch="modern")),
        (hooked_layout, dict(arch="modern", bias=True, attn_only=True)),
        (qwen3_layout, dict(arch="modern")),
        (qwen3_layout, dict(arch="modern", attn_only=True)),
    ],
)
def test_reading_back_what_a_layout_wrote_gives_every_weight_of_the_model(layout, options):
    model = _model(**options)
    state = model.state_dict()
    back = _round_trip(layout(model.config), model)
    assert set(back) == set(state) - {HEAD}  # every weight, the tied head being the token table
    for name, tensor in back.items():
        assert torch.equal(tensor, state[name]), name


def test_a_layout_without_a_part_of_the_model_writes_constants_in_its_place():
    """GPT-2's layout for a model without biases, or with blocks of attention alone, writes zero biases and an MLP
    of zeros (so the library computes the same function), and reads none of them back."""
    model = _model(attn_only=True)
    rows = gpt2_layout(model.config)
    out = written(rows, model.state_dict())
    assert not out["transformer.h.0.attn.c_attn.bias"].any() and not out["transformer.h.1.mlp.c_fc.weight"].any()
    assert torch.equal(out["transformer.h.0.ln_2.weight"], torch.ones(16))
    assert not any(name.endswith(".bias") or ".mlp." in name for name in _round_trip(rows, model))


def test_a_gpt2_file_is_read_through_the_same_table(tmp_path):
    """read_weights (what reading a Hugging Face folder or a nanoGPT checkpoint does) on what the table wrote."""
    model = _model(bias=True, qkv_bias=True)
    out = written(gpt2_layout(model.config, conv1d=False), model.state_dict())
    weights = read_weights(
        {n: tuple(t.shape) for n, t in out.items()}, out.__getitem__, model.config, conv1d=False, where="test"
    )
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[n], t) for n, t in model.state_dict().items())


@pytest.mark.parametrize("options", [dict(), dict(arch="modern"), dict(attn_only=True, relative_positions=True)])
def test_a_gptwatch_checkpoint_reads_back_as_written(tmp_path, options):
    from data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("char", "abcdefghijklmnopqrstuvwxyz0123456789 ")
    model = _model(**options)
    save_checkpoint(
        tmp_path / "ckpt.pt",
        {
            "model": model.state_dict(),
            "model_config": model.config.to_dict(),
            "tokenizer": tokenizer.to_meta(),
            "step": 3,
        },
    )
    loaded = load_model(tmp_path, torch.device("cpu"))
    assert loaded.model.config == model.config and loaded.checkpoint["step"] == 3
    assert all(torch.equal(loaded.model.state_dict()[n], t) for n, t in model.state_dict().items())


def test_what_train_py_saves_is_the_checkpoint_description_in_its_order(trained):
    """`Checkpoint` describes ckpt.pt: train.py writes its fields, in their order, after the format."""
    from dataclasses import fields

    from formats.checkpoint import Checkpoint

    saved = torch.load(trained.char, weights_only=True)
    assert list(saved) == ["format", "format_version", *(entry.name for entry in fields(Checkpoint))]


def test_validate_asks_what_the_description_says_resuming_needs(trained):
    """Each field resuming needs may be left out of a checkpoint that is only read as a model; each other field may
    not: `validate` reads the same description train.py saves by."""
    from dataclasses import fields

    from formats import CheckpointError, validate
    from formats.checkpoint import Checkpoint

    saved = torch.load(trained.char, weights_only=True)
    for entry in fields(Checkpoint):
        if entry.name == "data":  # what the run trained on: `saved_settings` checks it, neither reader needs it
            continue
        without = {key: value for key, value in saved.items() if key != entry.name}
        if entry.metadata["resume"]:
            validate(without, "ckpt.pt")
        else:
            with pytest.raises(CheckpointError, match=repr(entry.name)):
                validate(without, "ckpt.pt")
        if entry.name not in ("eval_step", "run_id"):  # None: a run not evaluated yet; one saved before runs had an id
            with pytest.raises(CheckpointError, match=repr(entry.name)):
                validate(without, "ckpt.pt", for_resume=True)
