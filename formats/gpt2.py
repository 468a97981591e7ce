"""Hugging Face GPT-2-family folders, as `save_pretrained` writes them and the hub serves them: `config.json`
with `model.safetensors` or `pytorch_model.bin`. Read without running any code from the folder: the config
is JSON, the weights a safetensors file (tensors only, by design) or a PyTorch archive read with
`torch.load(weights_only=True)`.

What a `GPT2Config` becomes, and what is refused because gptwatch's model would compute something else:

| GPT2Config | gptwatch |
|---|---|
| `n_layer`, `n_head`, `n_embd`, `vocab_size` | the same |
| `n_positions` | `block_size` |
| `activation_function` `gelu_new` or `gelu_pytorch_tanh` / `gelu` | `activation="gelu_tanh"` / `"gelu"` |
| biases in every layer (Conv1D, LayerNorm) | `bias=True`, `qkv_bias=True` |
| `n_inner` None or 4 x `n_embd`, `layer_norm_epsilon` 1e-5, a tied head | what gptwatch computes |

Refused by name: `scale_attn_by_inverse_layer_idx`, `reorder_and_upcast_attn`, `add_cross_attention`, no
`scale_attn_weights`, any other activation, epsilon or `n_inner`, an untied head, any other model class.

The vocabulary is GPT-2's BPE as it is (`FullGPT2Tokenizer`); a model with more rows than its 50,257 has
padding rows, never sampled. A folder that gptwatch's own `--export hf` wrote names its tokenizer in
`gptwatch_export.json`, which is used instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

import formats.optional as optional
from data.tokenizer import FullGPT2Tokenizer, Tokenizer, TokenizerMetaError, tokenizer_from_meta
from files import NotParsed, parse_json, read_text
from formats.layout import ForeignModelError, Reader, read_weights
from formats.torchfile import load_torch_file
from model.config import GPTConfig
from model.gpt import LN_EPS

CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")   # the first present is read
EXPORT_MARKER = "gptwatch_export.json"                 # written by `sample.py --export hf` (formats.export)
READ_CLASSES = ("GPT2LMHeadModel", "GPT2Model")        # GPT2Model: the same weights, the head tied to them
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


def read_hf_config(folder: Path) -> dict:
    """config.json as a dict; `ForeignModelError` for one that cannot be read or is not a JSON object."""
    path = folder / CONFIG
    text = read_text(path, "Hugging Face config", "give a folder that save_pretrained wrote", ForeignModelError)
    try:
        config = parse_json(text)
    except NotParsed as exc:
        raise ForeignModelError(f"{path} is not valid JSON ({exc}); use the config.json save_pretrained wrote") \
            from None
    if not isinstance(config, dict):
        raise ForeignModelError(f"{path} is not a JSON object; use the config.json save_pretrained wrote")
    return config


def gpt_config(hf: dict, where: Path) -> GPTConfig:
    """The gptwatch config computing what a model of the GPT2Config `hf` computes; `ForeignModelError` naming
    the class or the option that it cannot compute."""
    classes = hf.get("architectures") or []
    model_type = hf.get("model_type")
    if model_type != "gpt2" or not isinstance(classes, list) or not set(classes) <= set(READ_CLASSES):
        found = ", ".join(map(str, classes)) if isinstance(classes, list) and classes else f"model_type {model_type!r}"
        raise ForeignModelError(f"{where} describes a {found}, not a GPT-2-family model; gptwatch reads only "
                                f"GPT-2-family models ({READ_CLASSES[0]}) and nanoGPT checkpoints")
    for key, (value, meaning) in FIXED_OPTIONS.items():
        if hf.get(key, value) != value:
            _refuse(where, key, hf[key], meaning, f"{key}={json.dumps(value)}")
    sizes = {key: hf.get(key, default) for key, default in SIZES.items()}
    for key, value in sizes.items():
        if type(value) is not int or value <= 0:
            raise ForeignModelError(f"{where}: {key} is {json.dumps(value)}, not a positive integer; use the "
                                    f"config.json save_pretrained wrote")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        names = [json.dumps(name) for name in ACTIVATIONS]
        _refuse(where, "activation_function", activation, "another activation",
                f"activation_function {', '.join(names[:-1])} or {names[-1]}")
    try:
        config = GPTConfig(vocab_size=sizes["vocab_size"], block_size=sizes["n_positions"], n_layer=sizes["n_layer"],
                           n_head=sizes["n_head"], n_embd=sizes["n_embd"], bias=True, qkv_bias=True,
                           activation=ACTIVATIONS[activation])
    except ValueError as exc:
        raise ForeignModelError(f"{where} describes no model gptwatch can build ({exc})") from None
    if hf.get("n_inner") not in (None, config.mlp_width):
        _refuse(where, "n_inner", hf["n_inner"], "an MLP of another width than 4 x n_embd",
                f"n_inner={config.mlp_width}")
    return config


def _refuse(where: Path, key: str, value: object, meaning: str, read: str) -> None:
    raise ForeignModelError(f"{where} sets {key}={json.dumps(value)} ({meaning}), which gptwatch's model does not "
                            f"compute; only models with {read} are read")


def folder_tokenizer(folder: Path, config: GPTConfig) -> Tokenizer:
    """The folder's vocabulary: the one gptwatch's export recorded, else GPT-2's BPE as it is."""
    marker = folder / EXPORT_MARKER
    if marker.is_file():
        try:
            record = parse_json(read_text(marker, "export record", "export the model again", ForeignModelError))
            return tokenizer_from_meta(record.get("tokenizer"))
        except (NotParsed, AttributeError, TokenizerMetaError) as exc:
            raise ForeignModelError(f"{marker} does not describe the tokenizer of the export ({exc}); remove it to "
                                    f"read the folder with GPT-2's BPE, or export again") from None
    tokenizer = FullGPT2Tokenizer()
    if config.vocab_size < tokenizer.vocab_size:
        raise ForeignModelError(f"{folder}: its model has {config.vocab_size:,} token rows, fewer than the "
                                f"{tokenizer.vocab_size:,} of GPT-2's BPE, and no tokenizer gptwatch reads is "
                                f"named; only models over GPT-2's BPE (or gptwatch's own exports) are read")
    return tokenizer


def weights_path(folder: Path) -> Path:
    for name in WEIGHTS:
        if (folder / name).is_file():
            return folder / name
    sharded = " (sharded weights, *.index.json, are not read)" if any(folder.glob("*.index.json")) else ""
    raise ForeignModelError(f"{folder} has {CONFIG} but neither {' nor '.join(WEIGHTS)}{sharded}; give the folder "
                            f"save_pretrained wrote, with its weights")


@contextmanager
def open_weights(path: Path) -> Iterator[tuple[dict[str, tuple[int, ...]], Reader]]:
    """({name in the file: shape}, read(name) -> tensor) for a safetensors or PyTorch weights file, the
    shapes known before any tensor is read."""
    if path.suffix == ".safetensors":
        safetensors = optional.safetensors()
        try:
            with safetensors.safe_open(str(path), framework="pt") as handle:
                yield {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}, handle.get_tensor
        except (safetensors.SafetensorError, OSError) as exc:
            raise ForeignModelError(f"{path} is not a readable safetensors file ({' '.join(str(exc).split())[:120]});"
                                    f" use an intact copy") from None
        return
    state = load_torch_file(path, "weights file")
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ForeignModelError(f"{path} is not a state dict (named tensors); use the file save_pretrained wrote")
    yield {name: tuple(t.shape) for name, t in state.items()}, state.__getitem__


def read_hf_weights(folder: Path, config: GPTConfig) -> dict[str, torch.Tensor]:
    """gptwatch's state dict for a model of `config` from the folder's weights."""
    path = weights_path(folder)
    with open_weights(path) as (shapes, read):
        return read_weights(shapes, read, config, conv1d=True, where=str(path))
