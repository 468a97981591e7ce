"""Hugging Face transformers folders, as `save_pretrained` writes them and the hub serves them (fetched by name into
the Hugging Face cache), both ways, and the optional libraries a conversion needs.

Reading (`read_folder`) takes GPT-2-family models, without running any code from the folder: the config is
JSON, the weights a safetensors file or a PyTorch archive read with `torch.load(weights_only=True)`. The
vocabulary is GPT-2's BPE as it is, or the one gptwatch's own `--export hf` recorded in the folder.

Writing (`to_hf_model`, `sample.py --export hf FOLDER`) gives a standard class computing the same function, so the
folder loads with `AutoModelForCausalLM.from_pretrained(folder)`, offline and with no `trust_remote_code`. "gpt2"
-> `GPT2LMHeadModel`, its config from the same tables reading uses; "modern" -> `Qwen3ForCausalLM` (bias=False
only), with two exact rewritings:
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
from pathlib import Path
from types import ModuleType

import torch

from common.errors import UserError
from common.files import cannot, cannot_write, destination, read_record, read_text, regular_file, replace_folder
from common.parsing import NotParsed, parse_json
from data.tokenizer import EOT, GPT2Tokenizer, Tokenizer, TokenizerMetaError, tokenizer_from_meta
from formats.checkpoint import read_torch
from formats.export import Unsupported, check_positions, same_logits
from formats.format import CheckpointError, Format, Loaded, Parts, Source, check_fits, config_from, gpt2_bpe, imported
from formats.layout import RMS_EPS, gpt2_layout, qwen3_layout, read_state, read_weights, written
from model.attention import ROTARY_BASE
from model.config import GPTConfig
from model.gpt import GPT, LN_EPS

# The optional libraries live in requirements-interop.txt, not requirements.txt: together they add about half a
# gigabyte and seconds of import time that training and watching never need. A conversion imports them through
# `library` only, so a missing (or wrong) version is one `MissingDependency` line, not a traceback.
REQUIREMENTS = "requirements-interop.txt"
CONFIG = "config.json"
USE_CONFIG = "use the config.json save_pretrained wrote"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first present is read
MARKER = "gptwatch_export.json"  # in every folder `--export hf` writes: what it is, its files, where it came from
EXPORT_FORMAT = "gptwatch-huggingface"  # in the marker
READ_CLASSES = ("GPT2LMHeadModel", "GPT2Model")  # GPT2Model: the same weights, the head tied to them

# name -> (hub repository, n_layer, n_head, n_embd); every one has GPT-2's vocabulary and 1,024 positions
HUB_MODELS = {
    "gpt2": ("openai-community/gpt2", 12, 12, 768),
    "gpt2-medium": ("openai-community/gpt2-medium", 24, 16, 1024),
    "gpt2-large": ("openai-community/gpt2-large", 36, 20, 1280),
    "gpt2-xl": ("openai-community/gpt2-xl", 48, 25, 1600),
    "distilgpt2": ("distilbert/distilgpt2", 6, 12, 768),
}
HUB_FILES = [CONFIG, "model.safetensors"]  # each of them has its weights as safetensors
LOCAL_FOLDER_HELP = "or pass a local folder holding config.json and model.safetensors (or pytorch_model.bin)"

# GPT2Config's config.json, read and written through the same tables. Its sizes: {its key: (GPTConfig's field,
# GPT2Config's default, used where config.json leaves it out)}.
SIZES = {
    "n_layer": ("n_layer", 12),
    "n_head": ("n_head", 12),
    "n_embd": ("n_embd", 768),
    "vocab_size": ("vocab_size", 50257),
    "n_positions": ("block_size", 1024),
}
# Its activation_function: {its name: gptwatch's activation}; gptwatch writes the first name of each.
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
# Its options that change the function, each with the only value gptwatch computes (GPT2Config's default, used
# where config.json leaves it out, and what gptwatch writes) and what another value would mean.
FIXED_OPTIONS = {
    "scale_attn_by_inverse_layer_idx": (False, "attention scores also divided by the layer's number"),
    "reorder_and_upcast_attn": (False, "attention scores computed in another order and precision"),
    "scale_attn_weights": (True, "attention scores not divided by the square root of the head size"),
    "add_cross_attention": (False, "cross-attention to an encoder"),
    "tie_word_embeddings": (True, "an output head of its own, not the token table"),
    "layer_norm_epsilon": (LN_EPS, "another epsilon in every LayerNorm"),
}
# The JSON values every key read from config.json may hold, and their name in words: for the keys above, those of
# their default's type.
JSON_KINDS = {bool: ((bool,), "true or false"), int: ((int,), "a whole number"), float: ((int, float), "a number")}
KEY_TYPES = {
    "architectures": ((list,), "a list of class names"),
    "model_type": ((str,), "a string"),
    "activation_function": ((str,), "a string"),
    "n_inner": JSON_KINDS[int],
    **{key: JSON_KINDS[type(default)] for key, (_, default) in SIZES.items()},
    **{key: JSON_KINDS[type(value)] for key, (value, _) in FIXED_OPTIONS.items()},
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


def fill(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """`model`, a library's, in eval mode, every parameter of it set to the tensor of its name in `weights`. Their
    names and shapes must be its parameters' (a tied head is one of them): a version of the library whose
    parameters are others would keep one at any value, so it is refused."""
    params = dict(model.named_parameters())
    theirs = {name: tuple(p.shape) for name, p in params.items()}
    ours = {name: tuple(t.shape) for name, t in weights.items()}
    if theirs != ours:
        differ = [(name, theirs.get(name), ours.get(name)) for name in sorted(theirs.keys() | ours.keys())]
        raise RuntimeError(
            f"{type(model).__name__} of this version does not fit gptwatch's weights (name, its shape, gptwatch's: "
            f"{[row for row in differ if row[1] != row[2]][:3]}); use the version that {REQUIREMENTS} pins"
        )
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    return model.eval()


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
    other = [name for name in classes if name not in READ_CLASSES]
    if model_type != "gpt2" and classes and not other:  # GPT-2's own classes, the model_type spelt another way
        raise CheckpointError(
            f'{where} says "model_type": {json.dumps(model_type)} of a {classes[0]}, whose config.json says '
            f'"model_type": "gpt2"; if it is one, write that there'
        )
    if model_type != "gpt2" or other:
        found = ", ".join(other) if other else f"model_type {model_type!r}"
        raise CheckpointError(
            f"{where} describes a {found}, not a GPT-2-family model; gptwatch reads only "
            f"GPT-2-family models ({READ_CLASSES[0]}) and nanoGPT checkpoints"
        )
    for key, (value, meaning) in FIXED_OPTIONS.items():
        if hf.get(key, value) != value:
            _refuse(where, key, hf[key], meaning, f"{key}={json.dumps(value)}")
    sizes = {key: hf.get(key, default) for key, (_, default) in SIZES.items()}
    for key, value in sizes.items():
        if type(value) is not int or value <= 0:
            raise CheckpointError(f"{where}: {key} is {json.dumps(value)}, not a positive integer; {USE_CONFIG}")
    activation = hf.get("activation_function", "gelu_new")  # GPT2Config's default
    if activation not in ACTIVATIONS:
        names = [json.dumps(name) for name in ACTIVATIONS]
        read = f"activation_function {', '.join(names[:-1])} or {names[-1]}"
        _refuse(where, "activation_function", activation, "another activation", read)
    config = config_from(
        where,
        **{field: sizes[key] for key, (field, _) in SIZES.items()},
        bias=True,  # GPT-2 has biases everywhere, the query, key and value projections' too
        qkv_bias=True,
        activation=ACTIVATIONS[activation],
    )
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


def load(source: Source, device: torch.device, dropout: float | None) -> Loaded:
    folder = source.path if source.path is not None else fetch(source.hub, device)
    return imported(source.hub or f"the model in {folder}", read_folder(folder, source.hub), device, dropout)


def describe(record: dict) -> str:
    where = f"{record['hub']} ({record['path']})" if record.get("hub") else record["path"]
    return f"Hugging Face {record['class']} {where}"


def read_folder(folder: Path, hub: str | None) -> Parts:
    """A GPT-2-family folder (of the hub model `hub`, if one): (its gptwatch config, its tokenizer, weights(config)
    -> gptwatch's state dict, what was read). The weights are read last, once the model is known to fit."""
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
        refusal = f"{path} is not a state dict (named tensors); use the file save_pretrained wrote"
        return read_state(read_torch(path, "PyTorch file"), config, True, str(path), refusal)

    source = {
        "format": HUGGINGFACE.name,
        "path": str(folder),
        "hub": hub,
        "weights": path.name,
        "class": (hf.get("architectures") or ["GPT2LMHeadModel"])[0],
    }
    return config, tokenizer, weights, source


# --- models on the Hugging Face hub, by name -----------------------------------------------------------


def hub_name(source: str) -> str | None:
    """The hub model `source` names ("gpt2", or its repository "openai-community/gpt2"); None for any other."""
    return next((name for name, (repository, *_) in HUB_MODELS.items() if source in (name, repository)), None)


def hub_config(name: str) -> GPTConfig:
    """The config of a hub model, known without fetching it."""
    _, n_layer, n_head, n_embd = HUB_MODELS[name]  # the rest is GPT2Config's default
    return gpt_config({"model_type": "gpt2", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd}, Path(name))


def fetch(name: str, device: torch.device) -> Path:
    """The Hugging Face cache's folder of hub model `name`, downloaded first if need be, once it is known to fit."""
    check_fits(hub_config(name), name, device)
    hub = library("huggingface_hub", f"fetching {name} from the Hugging Face hub")
    repository = HUB_MODELS[name][0]
    try:
        return Path(hub.snapshot_download(repository, allow_patterns=HUB_FILES))
    except Exception as exc:  # offline, unreachable, renamed or refused: the hub's errors come as many types
        # an HTTP answer is a refusal (its errors are OSErrors too); any other failure to connect means offline
        answered = any(kind.__name__ == "HTTPError" for kind in type(exc).__mro__)
        offline = not answered and isinstance(exc, (OSError, ConnectionError, TimeoutError))
        why = (
            "this machine is offline, or cannot reach the hub, and the model is not in the Hugging Face cache yet"
            if offline
            else f"the hub refused to serve it ({type(exc).__name__})"
        )
        raise CheckpointError(
            f"cannot fetch {name} ({repository}) from the Hugging Face hub: {why}; connect to the "
            f"internet once (it is then kept in the Hugging Face cache), {LOCAL_FOLDER_HELP}"
        ) from None


# --- writing a folder -----------------------------------------------------------------------------------------


def check_supported(config: GPTConfig) -> None:
    """`Unsupported`, naming the part, when no standard class computes a model of `config` exactly."""
    check_positions(config, HUGGINGFACE.title, "GPT-2's learned position table and Qwen3's rotary positions")
    if config.modern and config.bias:
        raise Unsupported(
            "cannot export this model to Hugging Face exactly: the modern architecture goes to "
            "Qwen3ForCausalLM, whose MLP (c_fc, c_proj) and attention output (out_proj) have no biases, "
            "and this model has them (bias=true); export it to TransformerLens (--export tl FILE), or "
            "train with --bias=false"
        )


def gpt2_config(config: GPTConfig) -> dict:
    """The GPT2Config of a "gpt2" model of `config`: the tables `gpt_config` reads, the other way."""
    return {
        **{key: getattr(config, field) for key, (field, _) in SIZES.items()},
        "n_inner": config.mlp_width,
        "activation_function": hf_activation(config.activation),
        **{key: value for key, (value, _) in FIXED_OPTIONS.items()},
        **dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.0),  # dropout is training's, not the model's
    }


def hf_activation(activation: str) -> str:
    """GPT2Config's name of gptwatch's `activation` (the first ACTIVATIONS gives); TransformerLens's too."""
    return next(theirs for theirs, ours in ACTIVATIONS.items() if ours == activation)


def to_hf_model(model: GPT, eos_token_id: int | None = None):
    """A GPT2LMHeadModel or Qwen3ForCausalLM computing what `model` computes, on the CPU in float32."""
    check_supported(model.config)
    transformers = library("transformers", "exporting to Hugging Face", "tokenizers")
    config = model.config
    special = dict(bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id)
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
                tie_word_embeddings=True,
                **special,
            )
        )
    else:
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**gpt2_config(config), **special))
    # Its output head is its token table, one parameter (tie_word_embeddings): `fill` refuses a second one.
    return fill(hf, written(qwen3_layout(config) if config.modern else gpt2_layout(config), model.state_dict()))


def hf_tokenizer(tokenizer: Tokenizer):
    """A `transformers` fast tokenizer giving `tokenizer`'s ids. A text gptwatch refuses (a character or token the
    corpus never had) gets an id from `vocab_size` on, which the model refuses too, rather than another token."""
    transformers = library("transformers", "a Hugging Face tokenizer", "tokenizers")
    tokenizers = library("tokenizers", "a Hugging Face tokenizer")
    if isinstance(tokenizer, GPT2Tokenizer):
        backend = gpt2_backend(tokenizer, tokenizers)
        special = dict(eos_token=EOT, bos_token=EOT, pad_token=EOT)
    else:
        # A CharTokenizer: a BPE without merges, normalizer or pre-tokenizer, each character (spaces too) its own
        # token, at gptwatch's id. `<unk>` stays the BPE model's own: declared to transformers it would become an added
        # token, matched in text, where gptwatch reads "<unk>" as five characters.
        vocab = {c: i for i, c in enumerate(tokenizer.chars)} | {"<unk>": len(tokenizer.chars)}
        backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token="<unk>", fuse_unk=False))
        backend.decoder = tokenizers.decoders.Fuse()  # characters joined as they are, no spaces between
        special = {}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **special, clean_up_tokenization_spaces=False)


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


# --- the export target: sample.py --export hf FOLDER ---------------------------------------------------------


def check_export_folder(path: Path, problem: str | None) -> None:
    """`path` can take the export: a new folder, an empty one, or an earlier export (`problem`: what stands there)."""
    if problem != "a directory":
        raise UserError(
            f"{path} is {'a file' if problem is None else problem}; --export hf writes a folder: choose "
            f"a new folder name"
        )
    if is_earlier_export(path):
        return
    try:
        empty = not any(path.iterdir())
    except OSError as exc:
        raise UserError(f"{cannot('read folder', path, exc)}; choose another folder") from None
    if not empty:
        raise UserError(
            f"{path} is a folder that is not empty and holds no earlier export ({MARKER}); choose "
            f"a new or empty folder (an export replaces only its own earlier folder)"
        )


def is_earlier_export(path: Path) -> bool:
    """Whether `path` holds what `--export hf` wrote, which a new export may replace: a folder with its marker and no
    file but those the marker lists (nothing a user added is replaced)."""
    try:
        names = {p.name for p in path.iterdir()}
    except OSError:
        return False
    marker = read_record(path / MARKER)
    files = marker.get("files") if marker.get("format") == EXPORT_FORMAT else None
    return isinstance(files, list) and names <= {MARKER, *map(str, files)}


def write(loaded: Loaded, model: GPT, folder: Path, record: dict) -> tuple[str, str, str]:
    """The folder of `model` (`loaded`'s, in float32 on the CPU) with its tokenizer and the marker: (what it is, how
    close it computes, how to load it)."""
    hf = to_hf_model(model, eos_token_id=getattr(loaded.tokenizer, "eot_id", None))
    checked = same_logits(model, lambda idx: hf(idx).logits)
    tokenizer = hf_tokenizer(loaded.tokenizer)
    marker = {"format": EXPORT_FORMAT, "class": type(hf).__name__, **record}

    def save(staging: Path) -> None:
        hf.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        marker["files"] = sorted(p.name for p in staging.iterdir())
        (staging / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        # Every file gets the permissions of the marker, written the usual way (the umask's): safetensors writes
        # the weights readable by their owner alone (0600), the other files as any file (0644).
        mode = (staging / MARKER).stat().st_mode & 0o777
        for path in staging.iterdir():
            if path.is_file() and not path.is_symlink():
                path.chmod(mode)

    progress = library("transformers", "exporting to Hugging Face").utils.logging  # to_hf_model imported it
    shown = progress.is_progress_bar_enabled()
    progress.disable_progress_bar()  # a bar for writing one small file is noise in a command's output
    try:
        replace_folder(folder, save, last=MARKER)
    except OSError as exc:
        raise UserError(cannot_write(f"the Hugging Face folder {folder}", folder, exc, "choose another path")) from None
    finally:
        if shown:
            progress.enable_progress_bar()
    usage = (
        f"  from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"  model = AutoModelForCausalLM.from_pretrained({str(folder)!r}); "
        f"tokenizer = AutoTokenizer.from_pretrained({str(folder)!r})"
    )
    return f"Hugging Face {type(hf).__name__} with its tokenizer", checked, usage


HUGGINGFACE = Format(
    "huggingface",
    "Hugging Face",
    elsewhere=True,
    is_folder_of=lambda path: os.path.lexists(path / CONFIG),  # what it holds: read_folder checks
    load=load,
    describe=describe,
    target="hf",
    destination=lambda text: destination(text, "--export hf", folder=True, fix="give a folder name, e.g. model-hf"),
    check_path=check_export_folder,
    check_supported=check_supported,
    write=write,
)
