"""Models trained elsewhere (`formats.sources`): a Hugging Face GPT-2-family folder and a nanoGPT
checkpoint, each made here with random weights by its own code (transformers' `GPT2LMHeadModel` and
`save_pretrained`; nanoGPT's own `model.py` and its train.py's checkpoint layout), read into gptwatch
compute the same function: logits within 1e-4 of transformers' (the export's tolerance) and 1e-5 of
nanoGPT's, and the same greedy continuation. Every input that cannot be read exactly is one line naming
the problem and the fix, before anything large is read; the table of docs/errors.md ("Models from
elsewhere") is these messages, refreshed with `python tests/test_import.py --write`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import pickle
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
from conftest import SHARED, require_gpt2

from common.errors import GptwatchWarning, UsageError, UserError
from data.tokenizer import CharTokenizer, FullGPT2Tokenizer, TokenizerMetaError, tokenizer_from_meta
from formats import huggingface, load_model
from formats.checkpoint import GPTWATCH
from formats.format import CheckpointError
from formats.huggingface import HUGGINGFACE
from formats.nanogpt import NANOGPT
from formats.sources import describe, identify
from model.config import GPTConfig
from model.gpt import GPT
from model.memory import parameter_count
from tests.commands import ROOT

CPU = torch.device("cpu")
HF_TOL = 1e-4  # transformers' logits (the export's tolerance)
NANOGPT_TOL = 1e-5  # nanoGPT's logits
GPT2_VOCAB = 50257
DOC = ROOT / "docs" / "errors.md"
SECTION = ("<!-- import:start -->", "<!-- import:end -->")
NANOGPT_MODEL = SHARED / "anchors" / "nanogpt" / "model.py"


def needs(module: str):
    return pytest.importorskip(
        module,
        reason=f"{module} is optional: pip install -r requirements-interop.txt to test reading Hugging Face models",
    )


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def perturb_constants(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every 1-D parameter (biases start at 0, LayerNorm gains at 1) moved off its initial constant, so a
    bias or a norm read into the wrong place changes the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


# --- Hugging Face folders ---------------------------------------------------------------------------------


def hf_model(seed: int = 0, **config):
    """A randomly initialised GPT2LMHeadModel (small unless `config` says otherwise), eval mode."""
    transformers = needs("transformers")
    torch.manual_seed(seed)
    sizes = {"n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 64, "vocab_size": GPT2_VOCAB, **config}
    return perturb_constants(transformers.GPT2LMHeadModel(transformers.GPT2Config(**sizes)), seed)


def save_hf(model, folder: Path, weights: str = "model.safetensors") -> Path:
    """`save_pretrained`'s folder; for "pytorch_model.bin", its config beside the state dict torch.save wrote
    (the format transformers used before safetensors, tied head included)."""
    needs("safetensors")
    model.save_pretrained(folder)
    if weights == "pytorch_model.bin":
        (folder / "model.safetensors").unlink()
        torch.save(model.state_dict(), folder / weights)
    return folder


def hf_greedy(model, idx: torch.Tensor, n: int) -> torch.Tensor:
    with torch.no_grad():
        for _ in range(n):
            idx = torch.cat([idx, model(idx).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


def assert_same_function_as_hf(hf, folder: Path, lengths=(1, 9, 64), new_tokens: int = 6) -> None:
    imported = load_model(folder, CPU)
    model = imported.model
    g = torch.Generator().manual_seed(1)
    for length in lengths:
        idx = torch.randint(GPT2_VOCAB, (2, length), generator=g)
        with torch.no_grad():
            ours = model(idx, all_logits=True)[0]
            theirs = hf(idx).logits
        assert max_diff(ours, theirs) < HF_TOL, length
    prompt = torch.randint(GPT2_VOCAB, (1, 5), generator=g)
    assert torch.equal(model.generate(prompt, new_tokens, temperature=0), hf_greedy(hf, prompt, new_tokens))
    assert isinstance(imported.tokenizer, FullGPT2Tokenizer)
    assert model.lm_head.weight is model.wte.weight  # tied, so fine-tuning moves one matrix


@pytest.mark.parametrize("activation", ["gelu_new", "gelu"])
@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_hugging_face_folder_computes_what_transformers_computes(tmp_path, weights, activation):
    require_gpt2()
    hf = hf_model(activation_function=activation)
    folder = save_hf(hf, tmp_path / "m", weights)
    assert_same_function_as_hf(hf, folder)
    config = load_model(folder, CPU).model.config
    assert (config.bias, config.qkv_bias, config.vocab_used) == (True, True, None)
    assert config.activation == {"gelu_new": "gelu_tanh", "gelu": "gelu"}[activation]


def test_gpt2_small_shapes_compute_what_transformers_computes(tmp_path):
    """GPT-2 small's shapes: 12 layers of 12 heads, 768 wide, GPT-2's whole vocabulary, 1,024 positions."""
    require_gpt2()
    hf = hf_model(n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    folder = save_hf(hf, tmp_path / "gpt2-small")
    assert_same_function_as_hf(hf, folder, lengths=(12,), new_tokens=3)


def test_a_state_dict_in_the_original_layout_is_read(tmp_path):
    """GPT-2's files on the hub predate safetensors: a GPT2Model's names (no `transformer.` prefix), the causal
    mask buffers (`attn.bias`, `attn.masked_bias`) beside the weights, torch's format before 1.6."""
    require_gpt2()
    hf = hf_model()
    folder = save_hf(hf, tmp_path / "m", "pytorch_model.bin")
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    for n in range(2):
        state[f"h.{n}.attn.bias"] = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)
        state[f"h.{n}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    assert_same_function_as_hf(hf, folder, lengths=(7,))


def test_fewer_positions_crop_the_position_table(tmp_path):
    require_gpt2()
    hf = hf_model()
    folder = save_hf(hf, tmp_path / "m")
    loaded = load_model(folder, CPU, block_size=16)
    model = loaded.model
    assert model.config.block_size == loaded.checkpoint["model_config"]["block_size"] == 16
    assert model.wpe.weight.shape == (16, 32) and model.wpe.weight.requires_grad
    idx = torch.randint(GPT2_VOCAB, (1, 16))
    with torch.no_grad():
        assert max_diff(model(idx, all_logits=True)[0], hf(idx).logits) < HF_TOL
    assert torch.equal(model.generate(idx, 20, temperature=0), model.generate(idx, 20, temperature=0, use_cache=False))


def test_a_gptwatch_export_reads_back_with_its_own_tokenizer(tmp_path):
    """A folder gptwatch's `--export hf` wrote names its tokenizer (a compacted vocabulary), and the model it
    reads is the exported one: the same parameters, the biases gptwatch had not as zeros."""
    needs("transformers")
    from formats.huggingface import MARKER, to_hf_model

    tokenizer = CharTokenizer("abcdefgh")
    model = GPT(GPTConfig(vocab_size=8, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()
    folder = tmp_path / "export"
    to_hf_model(model).save_pretrained(folder)
    (folder / MARKER).write_text(json.dumps({"format": "gptwatch-huggingface", "tokenizer": tokenizer.to_meta()}))
    imported = load_model(folder, CPU)
    assert imported.tokenizer.to_meta() == tokenizer.to_meta()
    back = imported.model.state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(back[name], value), name
    assert all(not back[n].any() for n in back if n not in model.state_dict())  # the biases it had not: zeros
    idx = torch.randint(8, (2, 16))
    with torch.no_grad():
        assert max_diff(imported.model(idx, all_logits=True)[0], model(idx, all_logits=True)[0]) < NANOGPT_TOL


@pytest.mark.parametrize("target", ["hf", "tl"])
def test_an_imported_model_exports_with_its_settings(tmp_path, target):
    """The export honours what an import brings: query/key/value biases (`c_attn.bias`; `b_Q`, `b_K`, `b_V`) and
    the tanh GELU (`gelu_new` in both)."""
    require_gpt2()
    hf = hf_model()
    model = load_model(save_hf(hf, tmp_path / "m"), CPU).model
    idx = torch.randint(GPT2_VOCAB, (2, 20))
    with torch.no_grad():
        ours = model(idx, all_logits=True)[0]
        if target == "hf":
            from formats.huggingface import to_hf_model

            exported = to_hf_model(model)
            assert exported.config.activation_function == "gelu_new"
            theirs = exported(idx).logits
        else:
            needs("transformer_lens")
            from formats.transformerlens import to_hooked_transformer

            exported = to_hooked_transformer(model, device="cpu")
            assert exported.cfg.act_fn == "gelu_new" and bool(exported.blocks[0].attn.b_Q.any())
            theirs = exported(idx)
    assert max_diff(ours, theirs) < HF_TOL


# --- the hub --------------------------------------------------------------------------------------------


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline: nothing reaches the network."""
    hf_hub = needs("huggingface_hub")
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(hf_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_hub_name_is_read_from_the_hugging_face_cache(hub_cache, tmp_path, monkeypatch):
    """Once fetched, `gpt2` is read from the cache, offline; the memory check uses GPT-2's known size."""
    require_gpt2()
    hf = hf_model()
    snapshot = hub_cache / "models--openai-community--gpt2" / "snapshots" / ("0" * 40)
    save_hf(hf, snapshot)
    (hub_cache / "models--openai-community--gpt2" / "refs").mkdir()
    (hub_cache / "models--openai-community--gpt2" / "refs" / "main").write_text("0" * 40)
    monkeypatch.chdir(tmp_path)
    found = identify("gpt2")
    assert (found.format, found.path, found.hub) == (HUGGINGFACE, None, "gpt2")
    imported = load_model(identify("gpt2"), CPU)
    source = imported.checkpoint["imported"]
    assert source["hub"] == "gpt2" and Path(source["path"]) == snapshot
    assert describe(imported).startswith(
        f"Hugging Face GPT2LMHeadModel gpt2 ({snapshot}): 2 layers x 4 heads, 32 "
        f"wide, 64 positions, gpt2-full vocabulary of 50,257 tokens"
    )
    assert huggingface.hub_name("openai-community/gpt2") == "gpt2"


def test_the_hub_models_known_sizes_are_their_parameter_counts():
    """The counts GPT-2's papers and nanoGPT give, from the configs known here (no download)."""
    counts = {name: parameter_count(huggingface.hub_config(name)) for name in huggingface.HUB_MODELS}
    assert counts == {
        "gpt2": 124_439_808,
        "gpt2-medium": 354_823_168,
        "gpt2-large": 774_030_080,
        "gpt2-xl": 1_557_611_200,
        "distilgpt2": 81_912_576,
    }


@pytest.mark.parametrize(
    "settings", [dict(), dict(bias=True, qkv_bias=True), dict(vocab_used=40), dict(bias=True, activation="gelu_tanh")]
)
def test_the_counted_parameters_are_the_models(settings):
    config = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=2, n_embd=16, **settings)
    assert parameter_count(config) == sum(p.numel() for p in GPT(config).parameters())  # the tied head once


def test_a_local_folder_named_like_a_hub_model_wins_and_says_so(tmp_path, monkeypatch):
    require_gpt2()
    hf = hf_model()
    save_hf(hf, tmp_path / "gpt2")
    monkeypatch.chdir(tmp_path)
    with pytest.warns(
        GptwatchWarning,
        match=r"reading the local folder gpt2, not the hub model gpt2 .* give its "
        r"repository, openai-community/gpt2",
    ):
        imported = load_model(identify("gpt2"), CPU)
    assert imported.checkpoint["imported"]["hub"] is None and imported.checkpoint["imported"]["path"] == "gpt2"


# --- nanoGPT ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nanogpt(tmp_path_factory):
    """nanoGPT's own model.py (../shared/anchors/nanogpt), imported from a copy."""
    if not NANOGPT_MODEL.is_file():
        pytest.skip(f"{NANOGPT_MODEL} not present (the nanoGPT anchor sits beside the repository)")
    copy = tmp_path_factory.mktemp("nanogpt") / "nanogpt_model.py"
    shutil.copy(NANOGPT_MODEL, copy)
    spec = importlib.util.spec_from_file_location("nanogpt_model", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nanogpt_model(nanogpt, seed: int = 0, **sizes):
    args = {
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 16,
        "block_size": 32,
        "bias": True,
        "vocab_size": 65,
        "dropout": 0.0,
        **sizes,
    }
    torch.manual_seed(seed)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
        model = nanogpt.GPT(nanogpt.GPTConfig(**args))
    return perturb_constants(model, seed), args


def save_nanogpt(
    model,
    args: dict,
    out_dir: Path,
    *,
    compiled: bool = False,
    dataset: str = "shakespeare_char",
    state: dict | None = None,
) -> Path:
    """out_dir/ckpt.pt as nanoGPT's train.py writes it, after one optimizer step (so it holds moments)."""
    with contextlib.redirect_stdout(io.StringIO()):
        optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    model.train()
    idx = torch.randint(args["vocab_size"], (2, 8))
    model(idx, idx)[1].backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    raw_model = torch.compile(model) if compiled else model  # nanoGPT saves the compiled wrapper's state dict
    config = dict(
        out_dir=str(out_dir),
        eval_interval=250,
        eval_iters=200,
        log_interval=10,
        eval_only=False,
        always_save_checkpoint=False,
        init_from="scratch",
        wandb_log=False,
        dataset=dataset,
        gradient_accumulation_steps=1,
        batch_size=64,
        block_size=args["block_size"],
        dropout=0.0,
        learning_rate=1e-3,
        decay_lr=True,
        backend="nccl",
        device="cpu",
        dtype="float32",
        compile=compiled,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "model": state if state is not None else raw_model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.4697),
        "config": config,
    }
    torch.save(checkpoint, out_dir / "ckpt.pt")
    return out_dir / "ckpt.pt"


def save_meta(path: Path, chars: str) -> Path:
    """meta.pkl as nanoGPT's data/shakespeare_char/prepare.py writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    path.write_bytes(pickle.dumps(meta))
    return path


SHAKESPEARE_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def assert_same_function_as_nanogpt(ours: GPT, theirs, vocab: int) -> None:
    g = torch.Generator().manual_seed(2)
    for length in (1, 11, theirs.config.block_size):
        idx = torch.randint(vocab, (3, length), generator=g)
        with torch.no_grad():
            expected = theirs(idx, idx)[0]  # with targets, nanoGPT's logits cover every position
            assert max_diff(ours(idx, all_logits=True)[0], expected) < NANOGPT_TOL, length


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("meta_at", ["beside", "dataset"])
def test_a_nanogpt_char_checkpoint_computes_what_nanogpt_computes(nanogpt, tmp_path, bias, meta_at):
    """Its meta.pkl beside ckpt.pt, or where nanoGPT's sample.py finds it: <repository>/data/<dataset>/."""
    theirs, args = nanogpt_model(nanogpt, bias=bias)
    path = save_nanogpt(theirs, args, tmp_path / "repo" / "out-shakespeare-char")
    meta = path.parent / "meta.pkl" if meta_at == "beside" else tmp_path / "repo/data/shakespeare_char/meta.pkl"
    save_meta(meta, SHAKESPEARE_CHARS)
    imported = load_model(path.parent, CPU)
    assert imported.tokenizer.chars == SHAKESPEARE_CHARS
    assert describe(imported) == (
        f"nanoGPT checkpoint {path} (iteration 250): 2 layers x 2 heads, 16 wide, 32 "
        f"positions, char vocabulary of 65 tokens"
    )
    assert imported.checkpoint["imported"] == {
        "format": "nanogpt",
        "path": str(path),
        "meta": str(meta),
        "iter_num": 250,
        "best_val_loss": pytest.approx(1.4697),
    }
    assert (imported.model.config.bias, imported.model.config.qkv_bias) == (bias, bias)
    assert_same_function_as_nanogpt(imported.model, theirs, 65)
    text = "ROMEO:\nBut soft"
    assert imported.tokenizer.decode(imported.tokenizer.encode(text)) == text


def test_a_compiled_nanogpt_checkpoint_and_old_mask_buffers_are_read(nanogpt, tmp_path):
    """torch.compile's `_orig_mod.` prefix on every name; the causal-mask buffers nanoGPT kept before PyTorch 2."""
    theirs, args = nanogpt_model(nanogpt)
    path = save_nanogpt(theirs, args, tmp_path / "out", compiled=True)
    names = torch.load(path, weights_only=True)["model"]
    assert all(name.startswith("_orig_mod.") for name in names)
    assert_same_function_as_nanogpt(load_model(save_meta_beside(path), CPU).model, theirs, 65)
    state = dict(theirs.state_dict())
    for n in range(2):
        state[f"transformer.h.{n}.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
    path = save_nanogpt(theirs, args, tmp_path / "old", state=state)
    assert_same_function_as_nanogpt(load_model(save_meta_beside(path), CPU).model, theirs, 65)


def save_meta_beside(path: Path) -> Path:
    save_meta(path.parent / "meta.pkl", SHAKESPEARE_CHARS)
    return path


def test_a_nanogpt_model_on_a_text_that_repeats_itself_gets_no_spread(nanogpt, tmp_path):
    """`sample.py --init_from=ckpt.pt --heads --text` reads held-out windows as for gptwatch's own models: 'abc'
    repeated is three pairs of windows, fewer than a spread needs, and says so instead of a figure "± 0.000"."""
    from tests.commands import run_sample

    path = save_meta_beside(save_nanogpt(*nanogpt_model(nanogpt), tmp_path / "out"))
    text = tmp_path / "abc.txt"
    text.write_text("abc" * 2000)
    code, out, err = run_sample([f"--init_from={path}", "--device=cpu", "--heads", f"--text={text}"])
    assert code == 0, err
    assert "only 3 different pairs of 32-token windows" in out and not re.search(r"± 0\.0+\b", out), out


def test_a_nanogpt_bpe_checkpoint_pads_its_vocabulary_and_never_samples_the_padding(nanogpt, tmp_path):
    """No meta.pkl: GPT-2's BPE, 50,257 tokens in nanoGPT's 50,304 rows. The padding rows are made the most
    likely here, and still greedy and sampled tokens stay below 50,257."""
    require_gpt2()
    theirs, args = nanogpt_model(nanogpt, vocab_size=50304, n_embd=32)
    path = save_nanogpt(theirs, args, tmp_path / "out", dataset="openwebtext")
    imported = load_model(path, CPU)
    model = imported.model
    assert isinstance(imported.tokenizer, FullGPT2Tokenizer) and imported.checkpoint["imported"]["meta"] is None
    assert (model.config.vocab_size, model.config.vocab_used) == (50304, GPT2_VOCAB)
    assert_same_function_as_nanogpt(model, theirs, 50304)
    prompt = torch.tensor([imported.tokenizer.encode("Hello, my name is")])
    with torch.no_grad():
        best = int(model(prompt)[0][0, -1].argmax())
        model.wte.weight[GPT2_VOCAB:] = 100 * model.wte.weight[best]  # after the prompt, a padding row wins
        assert int(model(prompt)[0][0, -1].argmax()) >= GPT2_VOCAB
    for kwargs in (
        dict(temperature=0),
        dict(temperature=1.0, generator=torch.Generator().manual_seed(0)),
        dict(temperature=0, use_cache=False),
    ):
        new = model.generate(prompt, 12, **kwargs)[0, prompt.shape[1] :]
        assert int(new.max()) < GPT2_VOCAB, kwargs


def test_an_imported_model_saved_as_a_gptwatch_checkpoint_reads_back(nanogpt, tmp_path):
    """Its settings (query/key/value biases, padding rows) are recorded in the checkpoint and honoured when it is
    read again: the model a fine-tune starts from and saves."""
    require_gpt2()
    from formats.checkpoint import save_checkpoint

    theirs, args = nanogpt_model(nanogpt, vocab_size=50304, n_embd=32)
    imported = load_model(save_nanogpt(theirs, args, tmp_path / "nano"), CPU)
    save_checkpoint(
        tmp_path / "out" / "ckpt.pt", {**imported.checkpoint, "model": imported.model.state_dict(), "step": 0}
    )
    loaded = load_model(tmp_path / "out", CPU)
    assert loaded.model.config == imported.model.config and loaded.model.config.vocab_used == GPT2_VOCAB
    assert isinstance(loaded.tokenizer, FullGPT2Tokenizer)
    idx = torch.randint(50304, (2, 9))
    with torch.no_grad():
        assert torch.equal(loaded.model(idx, all_logits=True)[0], imported.model(idx, all_logits=True)[0])


def test_a_gptwatch_checkpoint_is_read_by_load_model(trained):
    assert identify(trained.char).format == GPTWATCH and identify(trained.char.parent).format == GPTWATCH
    loaded, expected = load_model(trained.char.parent, CPU), load_model(trained.char, CPU)
    assert loaded.checkpoint["step"] == expected.checkpoint["step"]
    for name, value in expected.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], value)


def test_nanogpts_checkpoint_loads_without_unpickling_objects(nanogpt, tmp_path):
    """Everything nanoGPT's train.py saves (its optimizer state, its config of plain settings) is tensors and
    plain values: torch's weights-only unpickler reads it whole."""
    theirs, args = nanogpt_model(nanogpt)
    path = save_nanogpt(theirs, args, tmp_path / "out")
    checkpoint = torch.load(path, weights_only=True)
    assert set(checkpoint) == {"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config"}
    assert identify(path).format == NANOGPT


# --- settings and tokenizers --------------------------------------------------------------------------------


def test_a_model_trained_here_is_described_as_before():
    """The settings only an imported model changes, and the switches a training config leaves off, are recorded
    only when set: a checkpoint of a model trained here holds the same model_config as before they existed, and
    reads back unchanged."""
    config = GPTConfig(vocab_size=65)
    assert tuple(config.to_dict()) == (
        "vocab_size",
        "arch",
        "n_layer",
        "n_head",
        "n_embd",
        "block_size",
        "dropout",
        "bias",
    )
    imported = GPTConfig(vocab_size=50304, bias=True, qkv_bias=True, activation="gelu_tanh", vocab_used=50257)
    assert GPTConfig(**imported.to_dict()) == imported
    assert {"qkv_bias", "activation", "vocab_used"} <= set(imported.to_dict())


def test_the_full_gpt2_tokenizer_travels_in_meta():
    require_gpt2()
    tokenizer = FullGPT2Tokenizer()
    assert tokenizer.vocab_size == GPT2_VOCAB
    import tiktoken

    text = "Hello world, héllo<|endoftext|>"
    assert tokenizer.encode(text) == tiktoken.get_encoding("r50k_base").encode(text, allowed_special="all")
    again = tokenizer_from_meta(json.loads(json.dumps(tokenizer.to_meta())))
    assert isinstance(again, FullGPT2Tokenizer) and again.decode(again.encode(text)) == text
    assert tokenizer.decode([15496, 50300]) == "Hello"  # a padding row's id is no text


def test_a_char_tokenizer_comes_from_nanogpts_vocabulary():
    tokenizer = CharTokenizer.from_stoi_itos({"a": 0, "b": 1, "\n": 2}, {0: "a", 1: "b", 2: "\n"})
    assert tokenizer.chars == "ab\n" and tokenizer.encode("ba\n") == [1, 0, 2]
    for stoi, itos in (
        ({"a": 0}, {1: "a"}),
        ({"a": 1, "b": 0}, {0: "a", 1: "b"}),
        ({"ab": 0}, {0: "ab"}),
        ([], {0: "a"}),
    ):
        with pytest.raises(TokenizerMetaError):
            CharTokenizer.from_stoi_itos(stoi, itos)


# --- bad input -----------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One bad input: `make(root)` prepares it in an empty folder and returns what to call; the call raises a
    `UserError` whose message names `words`."""

    id: str
    problem: str
    make: Callable[[Path, pytest.MonkeyPatch], Callable[[], object]]
    words: tuple[str, ...]
    exact: bool = True  # False: the message differs by machine; docs/errors.md shows one instance


def _hf_folder(root: Path, **config) -> Path:
    """A small GPT-2 folder, its config.json then edited to `config`."""
    folder = save_hf(hf_model(**{k: v for k, v in config.items() if k.startswith("n_")}), root / "m")
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, **config}))
    return folder


def _read(source: Path | str, **kwargs) -> Callable[[], object]:
    """Reading `source` as a model named on the command line (sample.py --init_from): `identify` first."""
    return lambda: load_model(identify(source), CPU, **kwargs)


def _edited_config(**config):
    return lambda root, mp: _read(_hf_folder(root, **config))


def _nanogpt_edited(change: Callable[[dict], None]):
    """A nanoGPT checkpoint (char, meta.pkl beside it) whose state dict `change` edits."""

    def make(root: Path, mp) -> Callable[[], object]:
        nanogpt = _nanogpt_module(root)
        theirs, args = nanogpt_model(nanogpt)
        state = dict(theirs.state_dict())
        change(state)
        return _read(save_meta_beside(save_nanogpt(theirs, args, root / "out", state=state)))

    return make


def _nanogpt_module(root: Path):
    if not NANOGPT_MODEL.is_file():
        pytest.skip(f"{NANOGPT_MODEL} not present")
    shutil.copy(NANOGPT_MODEL, root / "nanogpt_model.py")
    spec = importlib.util.spec_from_file_location("nanogpt_model_case", root / "nanogpt_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _RunsCommand:
    """Unpickling this would run a shell command: the attack a meta.pkl could carry."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _meta_that_runs_code(root: Path, mp) -> Callable[[], object]:
    make = _nanogpt_edited(lambda state: None)
    call = make(root, mp)
    marker = root / "ran"
    (root / "out" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65, "stoi": _RunsCommand(f"touch {marker}")}))

    def read():
        try:
            return call()
        finally:
            assert not marker.exists(), "the pickled command ran"

    return read


def _meta_of(value) -> Callable[[Path, pytest.MonkeyPatch], Callable[[], object]]:
    def make(root: Path, mp) -> Callable[[], object]:
        call = _nanogpt_edited(lambda state: None)(root, mp)
        (root / "out" / "meta.pkl").write_bytes(pickle.dumps(value))
        return call

    return make


def _tiny_memory(source: str | None):
    def make(root: Path, mp) -> Callable[[], object]:
        mp.setattr("model.memory.available_memory", lambda device: 1 << 20)
        if source is None:
            return _read(_hf_folder(root))
        with contextlib.suppress(ImportError):
            import huggingface_hub

            mp.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("downloaded first"))
        mp.chdir(root)
        return _read(source)

    return make


def _hub_offline(root: Path, mp) -> Callable[[], object]:
    hf_hub = needs("huggingface_hub")
    mp.setattr(hf_hub.constants, "HF_HUB_CACHE", str(root / "hf-cache"))
    mp.setattr(hf_hub.constants, "HF_HUB_OFFLINE", True)
    mp.chdir(root)
    return _read("gpt2")


def _without(module: str, source: str | None = None):
    def make(root: Path, mp) -> Callable[[], object]:
        if source is None:
            source_ = _hf_folder(root)
        else:
            source_ = source
            mp.chdir(root)
        mp.setitem(sys.modules, module, None)  # `import module` now fails as if it were not installed
        return _read(source_)

    return make


def _untied_head(root: Path, mp) -> Callable[[], object]:
    folder = _hf_folder(root)
    transformers = needs("transformers")
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder)
    state = hf.state_dict()
    state["lm_head.weight"] = state["lm_head.weight"] + 1
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    return _read(folder)


def _hf_weights_of_another_model(root: Path, mp) -> Callable[[], object]:
    folder = _hf_folder(root)
    small = save_hf(hf_model(n_layer=1), root / "other")
    shutil.copy(small / "model.safetensors", folder / "model.safetensors")
    return _read(folder)


def _cut_short(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[:1000])
    return path.parent


def _renamed(state: dict) -> None:
    state["transformer.h.1.mlp.c_fc.weights"] = state.pop("transformer.h.1.mlp.c_fc.weight")


def _hf_weights_edited(change: Callable[[dict], None], weights: str = "model.safetensors"):
    """A Hugging Face folder whose state dict `change` edits, saved as `weights`."""

    def make(root: Path, mp) -> Callable[[], object]:
        folder = _hf_folder(root)
        state = {name: t.clone() for name, t in hf_model().state_dict().items()}
        change(state)
        (folder / "model.safetensors").unlink()
        if weights == "model.safetensors":
            needs("safetensors")
            from safetensors.torch import save_file

            save_file({n: t.contiguous() for n, t in state.items() if n != "lm_head.weight"}, folder / weights)
        else:
            torch.save(state, folder / weights)
        return _read(folder)

    return make


def _claimed_config(**config):
    """A small folder whose config.json alone is edited to `config` (its weights stay the small model's)."""

    def make(root: Path, mp) -> Callable[[], object]:
        folder = save_hf(hf_model(), root / "m")
        saved = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**saved, **config}))
        return _read(folder)

    return make


def _nan(state: dict, name: str) -> None:
    state[name][0, 0] = float("nan")


def _nanogpt_checkpoint_edited(change: Callable[[dict], None]):
    """A nanoGPT checkpoint (char, meta.pkl beside it) whose whole contents `change` edits."""

    def make(root: Path, mp) -> Callable[[], object]:
        call = _nanogpt_edited(lambda state: None)(root, mp)
        path = root / "out" / "ckpt.pt"
        checkpoint = torch.load(path, weights_only=True)
        change(checkpoint)
        torch.save(checkpoint, path)
        return call

    return make


def _fifo(where: str):
    """A named pipe where a model file is read: the folder's ckpt.pt, or a file named like a hub model here."""

    def make(root: Path, mp) -> Callable[[], object]:
        mp.chdir(root)
        if where == "hub name":
            os.mkfifo(root / "gpt2")
            return _read("gpt2")
        (root / "out").mkdir()
        os.mkfifo(root / "out" / "ckpt.pt")
        return _read(root / "out")

    return make


CASES = [
    Case(
        "import-other-architecture",
        "a Hugging Face folder of another architecture (Llama)",
        _edited_config(model_type="llama", architectures=["LlamaForCausalLM"]),
        ("LlamaForCausalLM", "only GPT-2-family models (GPT2LMHeadModel) and nanoGPT checkpoints"),
    ),
    Case(
        "import-model-type-spelt-otherwise",
        'a GPT2LMHeadModel whose config.json says "model_type": "gpt-2"',
        _edited_config(model_type="gpt-2"),
        ('"model_type": "gpt-2" of a GPT2LMHeadModel', '"model_type": "gpt2"; if it is one, write that there'),
    ),
    Case(
        "import-inverse-layer-scaling",
        "GPT2Config scale_attn_by_inverse_layer_idx",
        _edited_config(scale_attn_by_inverse_layer_idx=True),
        ("scale_attn_by_inverse_layer_idx=true",),
    ),
    Case(
        "import-reorder-upcast",
        "GPT2Config reorder_and_upcast_attn",
        _edited_config(reorder_and_upcast_attn=True),
        ("reorder_and_upcast_attn=true",),
    ),
    Case(
        "import-unscaled-attention",
        "GPT2Config scale_attn_weights false",
        _edited_config(scale_attn_weights=False),
        ("scale_attn_weights=false",),
    ),
    Case(
        "import-cross-attention",
        "GPT2Config add_cross_attention",
        _edited_config(add_cross_attention=True),
        ("add_cross_attention=true",),
    ),
    Case(
        "import-n-inner",
        "GPT2Config n_inner other than 4 x n_embd",
        _edited_config(n_inner=96),
        ("n_inner=96", "n_inner=128"),
    ),
    Case(
        "import-untied-config",
        "GPT2Config tie_word_embeddings false",
        _edited_config(tie_word_embeddings=False),
        ("tie_word_embeddings=false",),
    ),
    Case(
        "import-activation",
        "another activation (relu)",
        _edited_config(activation_function="relu"),
        ('activation_function="relu"', '"gelu_new"'),
    ),
    Case(
        "import-epsilon",
        "another LayerNorm epsilon",
        _edited_config(layer_norm_epsilon=1e-6),
        ("layer_norm_epsilon=1e-06", "layer_norm_epsilon=1e-05"),
    ),
    Case(
        "import-untied-weights",
        "an output head that is not the token table",
        _untied_head,
        ("lm_head.weight", "not its token table"),
    ),
    Case(
        "import-hf-wrong-weights",
        "a folder whose weights are another model's",
        _hf_weights_of_another_model,
        ("missing transformer.h.1.attn.c_attn.bias",),
    ),
    Case(
        "import-damaged-safetensors",
        "a model.safetensors cut short",
        lambda root, mp: _read(_cut_short(_hf_folder(root) / "model.safetensors")),
        ("model.safetensors is not a readable safetensors file", "use an intact copy"),
    ),
    Case(
        "import-missing-key",
        "a nanoGPT checkpoint without a weight",
        _nanogpt_edited(lambda s: s.pop("transformer.h.0.ln_2.weight")),
        ("missing transformer.h.0.ln_2.weight",),
    ),
    Case(
        "import-unexpected-key",
        "a nanoGPT checkpoint with a renamed weight",
        _nanogpt_edited(_renamed),
        ("missing transformer.h.1.mlp.c_fc.weight", "unexpected transformer.h.1.mlp.c_fc.weights"),
    ),
    Case(
        "import-wrong-shape",
        "a nanoGPT checkpoint with a weight of another shape",
        _nanogpt_edited(lambda s: s.update({"transformer.h.0.attn.c_proj.weight": torch.zeros(16, 15)})),
        ("transformer.h.0.attn.c_proj.weight (16, 15) instead of (16, 16)",),
    ),
    Case(
        "import-meta-runs-code",
        "a meta.pkl whose unpickling would run a command (os.system)",
        _meta_that_runs_code,
        ("pickled Python object (posix.system)", "nothing in it was run"),
    ),
    Case(
        "import-meta-not-vocabulary",
        "a meta.pkl holding more than the vocabulary",
        _meta_of({"vocab_size": 65, "itos": {}, "stoi": {}, "notes": "x"}),
        ("'notes'", "not a vocabulary"),
    ),
    Case(
        "import-meta-other-dataset",
        "a meta.pkl of another dataset (another vocabulary size)",
        _meta_of({"vocab_size": 3, "itos": {0: "a", 1: "b", 2: "c"}, "stoi": {"a": 0, "b": 1, "c": 2}}),
        ("holds 3 characters", "65 token rows"),
    ),
    Case(
        "import-too-few-rows-hf",
        "a Hugging Face folder naming no tokenizer, with fewer token rows than GPT-2's BPE",
        lambda root, mp: _read(save_hf(hf_model(vocab_size=100), root / "m")),
        ("100 token rows", "fewer than the 50,257 of GPT-2's BPE"),
    ),
    Case(
        "import-too-few-rows-nanogpt",
        "a nanoGPT checkpoint of a char model with no meta.pkl to be found",
        lambda root, mp: _read(save_nanogpt(*nanogpt_model(_nanogpt_module(root)), root / "out")),
        ("65 token rows, too few for GPT-2's BPE", "no meta.pkl"),
    ),
    Case(
        "import-block-size",
        "a block size above the model's positions",
        lambda root, mp: _read(_hf_folder(root), block_size=65),
        ("block_size=65", "64 positions", "--block_size=64"),
    ),
    Case(
        "import-too-big-hub",
        "a hub model too large for memory (refused before downloading)",
        _tiny_memory("gpt2-xl"),
        ("gpt2-xl (1,557,611,200 parameters) needs at least", "(float32 weights", "1.0 MiB is free"),
    ),
    Case(
        "import-too-big-folder",
        "a local model too large for memory",
        _tiny_memory(None),
        ("parameters) needs at least", "of memory on cpu (float32 weights", "1.0 MiB is free"),
    ),
    Case(
        "import-nan-weight-safetensors",
        "a Hugging Face folder with a nan in a weight (safetensors)",
        _hf_weights_edited(lambda s: _nan(s, "transformer.h.0.mlp.c_fc.weight")),
        ("not finite", "transformer.h.0.mlp.c_fc.weight holds 1 nan value"),
    ),
    Case(
        "import-overflow-on-conversion",
        "a float64 weight beyond float32's range (pytorch_model.bin)",
        _hf_weights_edited(
            lambda s: s.update({"transformer.ln_f.weight": s["transformer.ln_f.weight"].double() * 1e300}),
            "pytorch_model.bin",
        ),
        ("not finite", "transformer.ln_f.weight holds 32 inf values"),
    ),
    Case(
        "import-nan-weight-nanogpt",
        "a nanoGPT checkpoint with an inf in a weight",
        _nanogpt_edited(
            lambda s: s.update(
                {
                    "transformer.h.1.attn.c_attn.weight":  # a copy: the model trains on
                    s["transformer.h.1.attn.c_attn.weight"].clone().fill_(float("inf"))
                }
            )
        ),
        ("not finite", "transformer.h.1.attn.c_attn.weight holds 768 inf values"),
    ),
    Case(
        "import-sparse-weight",
        "a nanoGPT checkpoint with a sparse tensor as a weight",
        _nanogpt_edited(
            lambda s: s.update({"transformer.h.0.ln_1.weight": s["transformer.h.0.ln_1.weight"].to_sparse()})
        ),
        ("transformer.h.0.ln_1.weight is a sparse tensor",),
    ),
    Case(
        "import-meta-weight",
        "a nanoGPT checkpoint with a meta tensor (no values) as a weight",
        _nanogpt_edited(lambda s: s.update({"transformer.h.0.ln_1.weight": torch.empty(16, device="meta")})),
        ("transformer.h.0.ln_1.weight is a meta tensor",),
    ),
    Case(
        "import-one-weight-two-names",
        "a weight under two names (with and without torch.compile's prefix)",
        _nanogpt_edited(lambda s: s.update({"_orig_mod.transformer.wte.weight": s["transformer.wte.weight"] + 1})),
        ("holds transformer.wte.weight twice", "_orig_mod.transformer.wte.weight"),
    ),
    Case(
        "import-unhashable-activation",
        "config.json's activation_function a list",
        _edited_config(activation_function=["gelu"]),
        ('activation_function is ["gelu"], not a string',),
    ),
    Case(
        "import-nested-architectures",
        "config.json's architectures a list of lists",
        _edited_config(architectures=[["GPT2LMHeadModel"]]),
        ("architectures is", "not a list of class names"),
    ),
    Case(
        "import-architectures-string",
        "config.json's architectures a string, not a list",
        _edited_config(architectures="GPT2LMHeadModel"),
        ('architectures is "GPT2LMHeadModel"', "not a list of class names"),
    ),
    Case(
        "import-no-model-type",
        "config.json without model_type",
        _edited_config(model_type=None),
        ("has no model_type",),
    ),
    Case(
        "import-huge-vocabulary",
        "config.json's vocab_size 10**400",
        _edited_config(vocab_size=10**400),
        ("'vocab_size' must be at most 2,147,483,647", "401 digits"),
    ),
    Case(
        "import-million-layers",
        "config.json claiming a million layers of width 8 (weights of 2 layers)",
        _claimed_config(n_layer=1_000_000, n_embd=8, n_head=2),
        ("1,000,000 layers", "tensors in all"),
    ),
    Case(
        "import-nanogpt-no-model-args",
        "a nanoGPT checkpoint without model_args",
        _nanogpt_checkpoint_edited(lambda c: c.pop("model_args")),
        ("looks like a nanoGPT checkpoint", "no 'model_args'"),
    ),
    Case(
        "import-fifo-checkpoint",
        "a folder whose ckpt.pt is a named pipe",
        _fifo("folder"),
        ("not a regular file (a pipe",),
    ),
    Case(
        "import-fifo-hub-name",
        "a named pipe here named like a hub model",
        _fifo("hub name"),
        ("not a regular file (a pipe",),
    ),
    Case(
        "import-hub-offline",
        "a hub name with the hub unreachable and nothing cached",
        _hub_offline,
        ("cannot fetch gpt2", "this machine is offline", "pass a local folder"),
    ),
    Case(
        "import-unknown-name",
        "a name that is neither a path nor a hub model",
        lambda root, mp: (mp.chdir(root), _read("gpt3"))[1],
        ("gpt3 is neither", "gpt2-xl", "pass a local folder"),
    ),
    Case(
        "import-empty-folder",
        "a folder with neither config.json nor ckpt.pt",
        lambda root, mp: _read(root),
        ("neither config.json", "nor ckpt.pt"),
    ),
    Case(
        "import-no-huggingface-hub",
        "a hub name without huggingface-hub installed",
        _without("huggingface_hub", "gpt2"),
        ("needs huggingface-hub", "pip install -r requirements-interop.txt"),
    ),
    Case(
        "import-no-safetensors",
        "model.safetensors without safetensors installed",
        _without("safetensors"),
        ("needs safetensors", "pip install -r requirements-interop.txt"),
    ),
]


def run_case(case: Case, root: Path) -> UserError:
    """The error `case` raises in `root`, checking that it raised nothing else and left the files as they were."""
    with pytest.MonkeyPatch.context() as mp:
        call = case.make(root, mp)
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        with pytest.raises(UserError) as raised:
            call()
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before, "a bad input changed files"
    return raised.value


def shown(error: UserError, root: Path) -> str:
    return str(error).replace(str(root), "TMP")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_naming_the_problem(case, tmp_path):
    if case.id not in ("import-unknown-name", "import-empty-folder", "import-no-huggingface-hub"):
        require_gpt2()
    error = run_case(case, tmp_path)
    message = str(error)
    assert "\n" not in message
    for word in case.words:
        assert word in message, f"{word!r} missing from: {message}"
    documented = doc_rows().get(case.id)
    assert documented is not None, f"{case.id} is not in docs/errors.md; run: python tests/test_import.py --write"
    assert documented[1] == error.status
    assert not case.exact or documented[2] == shown(error, tmp_path), (
        f"docs/errors.md is out of date for {case.id}; run: python tests/test_import.py --write"
    )


def test_a_block_size_above_the_positions_is_a_usage_error(tmp_path):
    require_gpt2()
    assert isinstance(run_case(next(c for c in CASES if c.id == "import-block-size"), tmp_path), UsageError)


def test_every_case_is_documented():
    assert sorted(doc_rows()) == sorted(c.id for c in CASES)


def test_a_checkpoint_holding_a_pickled_object_is_not_run(nanogpt, tmp_path):
    """Such a file is no checkpoint that can be read: working out what it is refuses it by name, as gptwatch's
    reader does, and ran nothing."""
    theirs, args = nanogpt_model(nanogpt)
    path = save_nanogpt(theirs, args, tmp_path / "out")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["config"]["dataset"] = _RunsCommand(f"touch {tmp_path / 'ran'}")
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=r"pickled Python object \(posix.system\).*only load checkpoints"):
        identify(path)
    assert not (tmp_path / "ran").exists()


def test_the_meta_pkl_reader_refuses_every_class_before_it_is_built(tmp_path):
    """Not only functions: any object a pickle would construct through its class is refused by name."""
    path = tmp_path / "meta.pkl"
    import datetime

    from formats.nanogpt import read_meta

    path.write_bytes(pickle.dumps({"itos": {0: "a"}, "stoi": {"a": 0}, "when": datetime.date(2020, 1, 1)}))
    with pytest.raises(CheckpointError, match=r"pickled Python object \(datetime.date\)"):
        read_meta(path)


# --- docs/errors.md -----------------------------------------------------------------------------------------


def doc_rows() -> dict[str, tuple[str, int, str]]:
    """{case id: (bad input, exit status, message)} from the table in docs/errors.md."""
    start, end = SECTION
    rows = {}
    for line in DOC.read_text(encoding="utf-8").split(start)[1].split(end)[0].splitlines():
        match = re.match(r"\| `([\w-]+)` \| (.*) \| (\d) \| `` (.*) `` \|$", line)
        if match:
            rows[match[1]] = (match[2], int(match[3]), match[4].replace("\\|", "|"))
    return rows


def doc_table() -> str:
    lines = ["| case | bad input | exit | message (after `error: `) |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            root = Path(tmp) / case.id
            root.mkdir()
            error = run_case(case, root)
            message = shown(error, root).replace("|", "\\|")
            lines.append(f"| `{case.id}` | {case.problem} | {error.status} | `` {message} `` |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.chdir(ROOT)
    torch.manual_seed(0)
    table = doc_table()
    if "--write" in sys.argv:
        text = DOC.read_text(encoding="utf-8")
        head, rest = text.split(SECTION[0])
        DOC.write_text(f"{head}{SECTION[0]}\n{table}\n{SECTION[1]}{rest.split(SECTION[1])[1]}", encoding="utf-8")
        print(f"updated {DOC}")
    else:
        print(table)


@pytest.mark.parametrize("dataset", ["..", "../..", "../elsewhere", "/abs/path", "shakespeare_char/.."])
def test_a_nanogpt_configs_dataset_that_is_no_plain_name_sends_the_reader_nowhere_else(tmp_path, dataset):
    """nanoGPT keeps a dataset's meta.pkl at <parent of out_dir>/data/<dataset>/meta.pkl; a dataset name that is no
    plain name ('..', a path) is not followed: only the meta.pkl beside the checkpoint is looked at."""
    from formats.nanogpt import META, meta_places

    path = tmp_path / "out" / "ckpt.pt"
    assert meta_places(path, {"config": {"dataset": dataset}}) == [path.parent / META]
    assert (
        meta_places(path, {"config": {"dataset": "shakespeare_char"}})[1]
        == tmp_path / "data" / "shakespeare_char" / META
    )
