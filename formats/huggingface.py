"""Hugging Face transformers folders, as `save_pretrained` writes them and the hub serves them, both ways, and the
optional libraries a conversion needs.

Reading (`read_folder`) takes GPT-2-family models, without running any code from the folder: the config is
JSON, the weights a safetensors file or a PyTorch archive read with `torch.load(weights_only=True)`. The
vocabulary is GPT-2's BPE as it is, or the one gptwatch's own `--export hf` recorded in the folder.

Writing (`to_hf_model`) gives a standard class computing the same function, so the folder loads with
`AutoModelForCausalLM.from_pretrained(folder)`, offline and with no `trust_remote_code`. "gpt2" ->
`GPT2LMHeadModel`; "modern" -> `Qwen3ForCausalLM` (bias=False only), with two exact rewritings:
- gptwatch rotates interleaved pairs (x[2i], x[2i+1]); Qwen3 rotates halves (x[i], x[i + D/2]). Reordering the
  rows of W_query and W_key inside each head as [0, 2, 4, ..., 1, 3, 5, ...] turns one into the other; q·k and
  the per-head RMS norm do not change under the same reordering of both, and values are untouched.
- ReLU² in Qwen3's gated MLP, down(act(gate·x) * up·x): with gate = up = c_fc and `hidden_act="relu"`,
  relu(h) * h is h² where h > 0 and 0 elsewhere: relu(h)² exactly.
Blocks of attention alone (`attn_only`) keep both classes' MLP, with every weight and bias of it 0: its output
is then exactly 0, whatever its norm gives it, and that norm's weight is 1 (its bias 0), so it stays finite.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from data.tokenizer import EOT, GPT2Tokenizer, Tokenizer, TokenizerMetaError, tokenizer_from_meta
from errors import UserError
from files import read_text, regular_file
from formats.checkpoint import CheckpointError, gpt2_bpe, read_torch
from formats.layout import GPT2_ACTIVATIONS, RMS_EPS, check_supported, gpt2_layout, qwen3_layout, read_weights, written
from model.attention import ROTARY_BASE
from model.config import GPTConfig
from model.gpt import GPT, LN_EPS
from parsing import NotParsed, parse_json

# The optional libraries live in requirements-interop.txt, not requirements.txt: together they add about half a
# gigabyte and seconds of import time that training and watching never need. A conversion imports them through
# `library` only, so a missing (or wrong) version is one `MissingDependency` line, not a traceback.
REQUIREMENTS = "requirements-interop.txt"
CONFIG = "config.json"
USE_CONFIG = "use the config.json save_pretrained wrote"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first present is read
MARKER = "gptwatch_export.json"  # in every folder `--export hf` writes: what it is, its files, where it came from
READ_CLASSES = ("GPT2LMHeadModel", "GPT2Model")  # GPT2Model: the same weights, the head tied to them
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}

# GPT2Config's options that change the function, each with the only value gptwatch computes (GPT2Config's
# default, used where config.json leaves it out) and what another value would mean.
FIXED_OPTIONS = {
    "scale_attn_by_inverse_layer_idx": (False, "attention scores also divided by the layer's number"),
    "reorder_and_upcast_attn": (False, "attention scores computed in another order and precision"),
    "scale_attn_weights": (True, "attention scores not divided by the square root of the head size"),
    "add_cross_attention": (False, "cross-attention to an encoder"),
    "tie_word_embeddings": (True, "an output head of its own, not the token table"),
    "layer_norm_epsilon": (LN_EPS, "another epsilon in every LayerNorm"),
}
SIZES = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "n_positions": 1024}  # GPT2Config's
# The JSON type of every key read from config.json, and its name in words.
KEY_TYPES = {
    "architectures": (list, "a list of class names"),
    "model_type": (str, "a string"),
    "activation_function": (str, "a string"),
    "n_inner": (int, "a whole number"),
    **{key: (int, "a whole number") for key in SIZES},
    **{
        key: (
            (bool,) if isinstance(value, bool) else (int, float),
            "true or false" if isinstance(value, bool) else "a number",
        )
        for key, (value, _) in FIXED_OPTIONS.items()
    },
}


class MissingDependency(UserError):
    """An optional library that an export or an import needs is absent, or is a version without what it needs."""


def library(module: str, purpose: str, *also: str) -> ModuleType:
    """`module` (then the modules `also`, which it brings), or a `MissingDependency` naming what is missing."""
    modules = []
    for name in (module, *also):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            raise MissingDependency(
                f"{purpose} needs {name.replace('_', '-')}, which is not installed here; install "
                f"it with: pip install -r {REQUIREMENTS}"
            ) from None
    return modules[0]


def gpt_config(hf: dict, where: Path) -> GPTConfig:
    """The gptwatch config computing what a model of the GPT2Config `hf` computes."""
    # Every key read holds a JSON value of its type (a list where a string belongs would break what reads it).
    for key, (kinds, words) in KEY_TYPES.items():
        value = hf.get(key)
        if value is None:  # left out, or null: the default (or, for model_type, its own message)
            continue
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if key == "architectures":
            ok = ok and all(isinstance(name, str) for name in value)
        if not ok:
            shown = json.dumps(value)
            shown = shown if len(shown) <= 60 else f"{shown[:50]}... ({len(shown):,} characters)"
            raise CheckpointError(f"{where}: {key} is {shown}, not {words}; {USE_CONFIG}")
    classes = hf.get("architectures") or []
    model_type = hf.get("model_type")
    if model_type is None:
        raise CheckpointError(
            f'{where} has no model_type (a GPT-2-family config.json says "model_type": "gpt2"); {USE_CONFIG}'
        )
    if model_type != "gpt2" or not set(classes) <= set(READ_CLASSES):
        found = ", ".join(classes) if classes else f"model_type {model_type!r}"
        raise CheckpointError(
            f"{where} describes a {found}, not a GPT-2-family model; gptwatch reads only "
            f"GPT-2-family models ({READ_CLASSES[0]}) and nanoGPT checkpoints"
        )
    for key, (value, meaning) in FIXED_OPTIONS.items():
        if hf.get(key, value) != value:
            _refuse(where, key, hf[key], meaning, f"{key}={json.dumps(value)}")
    sizes = {key: hf.get(key, default) for key, default in SIZES.items()}
    for key, value in sizes.items():
        if type(value) is not int or value <= 0:
            raise CheckpointError(f"{where}: {key} is {json.dumps(value)}, not a positive integer; {USE_CONFIG}")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        names = [json.dumps(name) for name in ACTIVATIONS]
        _refuse(
            where,
            "activation_function",
            activation,
            "another activation",
            f"activation_function {', '.join(names[:-1])} or {names[-1]}",
        )
    try:
        config = GPTConfig(
            vocab_size=sizes["vocab_size"],
            block_size=sizes["n_positions"],
            n_layer=sizes["n_layer"],
            n_head=sizes["n_head"],
            n_embd=sizes["n_embd"],
            bias=True,
            qkv_bias=True,
            activation=ACTIVATIONS[activation],
        )
    except ValueError as exc:
        raise CheckpointError(f"{where} describes no model gptwatch can build ({exc})") from None
    if hf.get("n_inner") not in (None, config.mlp_width):
        _refuse(
            where, "n_inner", hf["n_inner"], "an MLP of another width than 4 x n_embd", f"n_inner={config.mlp_width}"
        )
    return config


def _refuse(where: Path, key: str, value: object, meaning: str, read: str) -> None:
    raise CheckpointError(
        f"{where} sets {key}={json.dumps(value)} ({meaning}), which gptwatch's model does not "
        f"compute; only models with {read} are read"
    )


def read_folder(folder: Path, hub: str | None) -> tuple[GPTConfig, Tokenizer, Callable, dict]:
    """A GPT-2-family folder: (its gptwatch config, its tokenizer, weights(config) -> gptwatch's state dict, what
    was read). The weights are read last, once the model is known to fit (formats/sources.py)."""
    text = read_text(
        folder / CONFIG, "Hugging Face config", "give a folder that save_pretrained wrote", CheckpointError
    )
    try:
        hf = parse_json(text)
    except NotParsed as exc:
        raise CheckpointError(f"{folder / CONFIG} is not valid JSON ({exc}); {USE_CONFIG}") from None
    if not isinstance(hf, dict):
        raise CheckpointError(f"{folder / CONFIG} is not a JSON object; {USE_CONFIG}")
    config = gpt_config(hf, folder / CONFIG)
    path = next((folder / name for name in WEIGHTS if os.path.lexists(folder / name)), None)  # `weights` checks
    if path is None:
        sharded = " (sharded weights, *.index.json, are not read)" if any(folder.glob("*.index.json")) else ""
        raise CheckpointError(
            f"{folder} has {CONFIG} but neither {' nor '.join(WEIGHTS)}{sharded}; give the folder "
            f"save_pretrained wrote, with its weights"
        )
    marker = folder / MARKER  # the vocabulary gptwatch's export recorded, else GPT-2's BPE as it is
    if marker.is_file():
        try:
            record = parse_json(read_text(marker, "export record", "export the model again", CheckpointError))
            tokenizer = tokenizer_from_meta(record.get("tokenizer"))
        except (NotParsed, AttributeError, TokenizerMetaError) as exc:
            raise CheckpointError(
                f"{marker} does not describe the tokenizer of the export ({exc}); remove it to "
                f"read the folder with GPT-2's BPE, or export again"
            ) from None
    else:
        tokenizer = gpt2_bpe(
            config,
            lambda n: (
                f"{folder}: its model has {config.vocab_size:,} token rows, fewer than "
                f"the {n:,} of GPT-2's BPE, and no tokenizer gptwatch reads is named; only models over "
                f"GPT-2's BPE (or gptwatch's own exports) are read"
            ),
        )

    def weights(config: GPTConfig) -> dict[str, torch.Tensor]:  # every name and shape known before any is read
        regular_file(path, "weights file", "give the folder save_pretrained wrote, with its weights", CheckpointError)
        if path.suffix == ".safetensors":
            safetensors = library("safetensors", "reading model.safetensors")
            try:
                with safetensors.safe_open(str(path), framework="pt") as handle:
                    shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
                    return read_weights(shapes, handle.get_tensor, config, conv1d=True, where=str(path))
            except (safetensors.SafetensorError, OSError) as exc:
                raise CheckpointError(
                    f"{path} is not a readable safetensors file ({' '.join(str(exc).split())[:120]});"
                    f" use an intact copy"
                ) from None
        state = read_torch(path, "PyTorch file")
        if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
            raise CheckpointError(f"{path} is not a state dict (named tensors); use the file save_pretrained wrote")
        return read_weights(
            {name: tuple(t.shape) for name, t in state.items()}, state.__getitem__, config, conv1d=True, where=str(path)
        )

    source = {
        "format": "huggingface",
        "path": str(folder),
        "hub": hub,
        "weights": path.name,
        "class": (hf.get("architectures") or ["GPT2LMHeadModel"])[0],
    }
    return config, tokenizer, weights, source


# --- writing a folder -----------------------------------------------------------------------------------------


def to_hf_model(model: GPT, eos_token_id: int | None = None):
    """A GPT2LMHeadModel or Qwen3ForCausalLM computing what `model` computes, on the CPU in float32."""
    check_supported(model.config, "hf")
    transformers = library("transformers", "exporting to Hugging Face", "tokenizers")
    config = model.config
    special = dict(
        bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id, tie_word_embeddings=True
    )
    if config.modern:
        hf = transformers.Qwen3ForCausalLM(
            transformers.Qwen3Config(
                vocab_size=config.vocab_size,
                hidden_size=config.n_embd,
                intermediate_size=config.mlp_width,
                num_hidden_layers=config.n_layer,
                num_attention_heads=config.n_head,
                num_key_value_heads=config.n_head,
                head_dim=config.head_dim,
                hidden_act="relu",
                max_position_embeddings=config.block_size,
                rms_norm_eps=RMS_EPS,
                rope_parameters={"rope_type": "default", "rope_theta": float(ROTARY_BASE)},
                attention_bias=False,
                attention_dropout=0.0,
                use_sliding_window=False,
                **special,
            )
        )
    else:
        hf = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=config.vocab_size,
                n_positions=config.block_size,
                n_embd=config.n_embd,
                n_layer=config.n_layer,
                n_head=config.n_head,
                n_inner=config.mlp_width,
                activation_function=GPT2_ACTIVATIONS[config.activation],
                layer_norm_epsilon=LN_EPS,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                **special,
            )
        )
    rows = qwen3_layout(config) if config.modern else gpt2_layout(config)
    weights = written(rows, model.state_dict())
    missing, unexpected = hf.load_state_dict(weights, strict=False)
    if unexpected or set(missing) != {"lm_head.weight"}:
        raise RuntimeError(
            f"{type(hf).__name__} of this transformers version does not fit gptwatch's weights (missing "
            f"{sorted(missing)}, unexpected {sorted(unexpected)}); use the version that "
            f"{REQUIREMENTS} pins"
        )
    hf.tie_weights()
    if hf.get_output_embeddings().weight.data_ptr() != hf.get_input_embeddings().weight.data_ptr():
        raise RuntimeError(f"{type(hf).__name__}'s output head is not tied to its embedding here")
    return hf.eval()


def hf_tokenizer(tokenizer: Tokenizer):
    """A `transformers` fast tokenizer giving `tokenizer`'s ids. A text gptwatch refuses (a character or token the
    corpus never had) gets an id from `vocab_size` on, which the model refuses too, rather than another token."""
    transformers = library("transformers", "a Hugging Face tokenizer", "tokenizers")
    tokenizers = library("tokenizers", "a Hugging Face tokenizer")
    if isinstance(tokenizer, GPT2Tokenizer):
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=gpt2_backend(tokenizer, tokenizers),
            eos_token=EOT,
            bos_token=EOT,
            pad_token=EOT,
            clean_up_tokenization_spaces=False,
        )
    # A CharTokenizer: a BPE without merges, normalizer or pre-tokenizer, each character (spaces too) its own token,
    # at gptwatch's id. `<unk>` stays the BPE model's own: declared to transformers it would become an added token,
    # matched in text, where gptwatch reads "<unk>" as five characters.
    vocab = {c: i for i, c in enumerate(tokenizer.chars)} | {"<unk>": len(tokenizer.chars)}
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token="<unk>", fuse_unk=False))
    backend.decoder = tokenizers.decoders.Fuse()  # characters joined as they are, no spaces between
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False)


def gpt2_backend(tokenizer: GPT2Tokenizer, tokenizers):
    """r50k_base as a `tokenizers` byte-level BPE, renumbered to `tokenizer`'s ids. Exact: tiktoken merges, in each
    piece of its regular expression, the adjacent pair whose concatenation has the lowest rank, and takes a whole
    piece that is a token as it is; the `tokenizers` BPE does the same with `ignore_merges=True` and a merge for
    every way a token splits into two tokens, ranked by the token it makes."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's printable stand-in for each byte

    enc = tokenizer.enc
    table = bytes_to_unicode()

    def text(token: bytes) -> str:
        return "".join(table[b] for b in token)

    eot = enc.eot_token
    ranks = {enc.decode_single_token_bytes(rank): rank for rank in range(enc.n_vocab) if rank != eot}
    compact = {orig: i for i, orig in enumerate(tokenizer.kept_ids)}
    unseen = iter(range(tokenizer.vocab_size, tokenizer.vocab_size + enc.n_vocab))
    vocab, merges = {}, []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        vocab[text(token)] = compact[rank] if rank in compact else next(unseen)
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges += [(text(a), text(b)) for a, b in sorted(splits, key=lambda ab: (ranks[ab[0]], ranks[ab[1]]))]
    vocab[EOT] = compact[eot]
    backend = tokenizers.Tokenizer(
        tokenizers.models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=True)
    )
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [
            # r50k's own regular expression: tiktoken keeps it only as this attribute
            tokenizers.pre_tokenizers.Split(tokenizers.Regex(enc._pat_str), behavior="isolated"),
            tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = tokenizers.decoders.ByteLevel()
    # Matched whole wherever it is written, as gptwatch's tokenizer allows it, at its compact id.
    backend.add_special_tokens([tokenizers.AddedToken(EOT, special=True, normalized=False)])
    return backend
