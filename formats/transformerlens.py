"""A gptwatch model as a TransformerLens 3.x `HookedTransformer` that computes the same function: no download, no
tokenizer (gptwatch's compact vocabularies are not TransformerLens's, so token ids come from gptwatch's). And the
export target `sample.py --export tl FILE`: one file holding the HookedTransformer's config and state dict.
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from common.errors import UserError
from common.files import cannot_write, destination, replace_file
from formats.checkpoint import torch_file
from formats.export import check_positions, same_logits
from formats.format import Format, Loaded
from formats.huggingface import REQUIREMENTS, MissingDependency, fill, hf_activation, library
from formats.layout import RMS_EPS, hooked_layout, written
from model.attention import ROTARY_BASE
from model.config import GPTConfig
from model.gpt import GPT, LN_EPS

EXPORT_FORMAT = "gptwatch-transformerlens"  # in the file --export tl writes


@contextmanager
def quiet_deprecation():
    """Silences transformer-lens 3.x's DeprecationWarning on building a HookedTransformer (it points
    to 4.x's TransformerBridge; requirements-interop.txt pins 3.x on purpose, see there)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        yield


def check_supported(config: GPTConfig) -> None:
    """`Unsupported`, naming the part, when TransformerLens cannot compute a model of `config` exactly."""
    check_positions(config, TRANSFORMERLENS.title, "learned absolute, rotary, shortformer and ALiBi positions")


def hooked_config(config: GPTConfig) -> dict[str, Any]:
    """The `HookedTransformerConfig` arguments for a model of `config`, as plain values (no device: TransformerLens
    picks one where the file is loaded)."""
    mlp = dict(attn_only=True) if config.attn_only else dict(d_mlp=config.mlp_width)
    common = dict(
        n_layers=config.n_layer,
        d_model=config.n_embd,
        n_heads=config.n_head,
        d_head=config.head_dim,
        **mlp,
        d_vocab=config.vocab_size,
        n_ctx=config.block_size,
        # gptwatch adds no beginning-of-text token; its tokenizer's ids go in as they are
        default_prepend_bos=False,
        dtype=torch.float32,
        init_weights=False,
        model_name="gptwatch",
        original_architecture=f"gptwatch-{config.arch}",
    )
    if config.modern:
        return dict(
            common,
            act_fn="relu2",
            normalization_type="RMSPre",
            eps=RMS_EPS,
            positional_embedding_type="rotary",
            rotary_dim=config.head_dim,
            rotary_base=ROTARY_BASE,
            rotary_adjacent_pairs=True,
            use_qk_norm=True,
        )
    return dict(
        common,
        act_fn=hf_activation(config.activation),
        normalization_type="LN",
        eps=LN_EPS,
        positional_embedding_type="standard",
    )


def to_hooked_transformer(model: GPT, device: str | torch.device | None = None):
    """A `HookedTransformer` computing what `model` computes (same logits, same attention patterns under
    `blocks.{l}.attn.hook_pattern`), on `device` (default: the model's)."""
    check_supported(model.config)
    purpose = "exporting to TransformerLens"
    tl = library("transformer_lens", purpose)
    if not hasattr(tl, "HookedTransformer"):  # 3.x has it: 4.0 removed it
        try:
            version = importlib.metadata.version("transformer-lens")
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        raise MissingDependency(
            f"{purpose} needs transformer-lens 3.x (HookedTransformer); version {version} here "
            f"has none (4.0 removed it); install the pinned one with: pip install -r "
            f"{REQUIREMENTS}"
        )
    device = device if device is not None else next(model.parameters()).device
    with quiet_deprecation():
        hooked = tl.HookedTransformer(tl.HookedTransformerConfig(**hooked_config(model.config), device=str(device)))
    return fill(hooked, written(hooked_layout(model.config), model.state_dict()))


# --- the export target: sample.py --export tl FILE -----------------------------------------------------------


def export_file(text: str) -> Path:
    example = (Path(text) if text.endswith(("/", os.sep, ".")) else Path(text).parent) / "model.tl.pt"
    return destination(text, "--export tl", folder=False, fix=f"give a file path, e.g. {example}")


def check_export_file(path: Path, problem: str | None) -> None:
    """`path` can take the export: nothing, or an earlier export (`problem`: what stands there)."""
    if problem == "a directory":
        raise UserError(
            f"{path} is a directory, where --export tl writes one file; give a file path, e.g. {path / 'model.tl.pt'}"
        )
    EXPORT_FILE.check(path, "choose another path", "--export tl's file")


EXPORT_FILE = torch_file("an --export tl file", EXPORT_FORMAT)  # known by its first key, as a checkpoint is


def write(loaded: Loaded, model: GPT, path: Path, record: dict) -> tuple[str, str, str]:
    """The file of `model` (`loaded`'s, in float32 on the CPU): (what it is, how close it computes, how to load it)."""
    hooked = to_hooked_transformer(model, device="cpu")
    checked = same_logits(model, hooked)
    # the config and state dict TransformerLens loads, plain values and tensors only (weights_only=True reads it)
    contents = {
        "format": EXPORT_FORMAT,
        "format_version": 1,
        "config": hooked_config(model.config),
        "state_dict": {name: t.detach().cpu() for name, t in hooked.state_dict().items()},
        **record,
    }
    try:
        replace_file(path, lambda fh: torch.save(contents, fh))
    except OSError as exc:
        raise UserError(cannot_write(f"the TransformerLens file {path}", path, exc, "choose another path")) from None
    usage = (
        f"  import torch; from transformer_lens import HookedTransformer\n"
        f"  saved = torch.load({str(path)!r})\n"
        f'  model = HookedTransformer(saved["config"]); model.load_state_dict(saved["state_dict"])'
    )
    return "TransformerLens HookedTransformer (config and state dict)", checked, usage


TRANSFORMERLENS = Format(
    "transformerlens",
    "TransformerLens",
    target="tl",
    destination=export_file,
    check_path=check_export_file,
    check_supported=check_supported,
    write=write,
)
