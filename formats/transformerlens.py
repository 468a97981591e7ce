"""A gptwatch model as a TransformerLens 3.x `HookedTransformer` that computes the same function: no download, no
tokenizer (gptwatch's compact vocabularies are not TransformerLens's, so token ids come from gptwatch's).
"""

from __future__ import annotations

import importlib.metadata
import warnings
from contextlib import contextmanager
from typing import Any

import torch

from formats.huggingface import REQUIREMENTS, MissingDependency, library
from formats.layout import GPT2_ACTIVATIONS, RMS_EPS, check_supported, hooked_layout, written
from model.attention import ROTARY_BASE
from model.config import GPTConfig
from model.gpt import GPT, LN_EPS


@contextmanager
def quiet_deprecation():
    """Silences transformer-lens 3.x's DeprecationWarning on building a HookedTransformer (it points
    to 4.x's TransformerBridge; requirements-interop.txt pins 3.x on purpose, see there)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        yield


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
        act_fn=GPT2_ACTIVATIONS[config.activation],
        normalization_type="LN",
        eps=LN_EPS,
        positional_embedding_type="standard",
    )


def to_hooked_transformer(model: GPT, device: str | torch.device | None = None):
    """A `HookedTransformer` computing what `model` computes (same logits, same attention patterns under
    `blocks.{l}.attn.hook_pattern`), on `device` (default: the model's). A mismatch with this transformer-lens
    version's parameters is refused: one that gptwatch does not fill would keep any value."""
    check_supported(model.config, "tl")
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
    weights = written(hooked_layout(model.config), model.state_dict())
    params = {name for name, _ in hooked.named_parameters()}
    if params != set(weights):
        raise RuntimeError(
            f"this transformer-lens has parameters {sorted(params - set(weights))} that gptwatch does "
            f"not fill, and lacks {sorted(set(weights) - params)}; use the version that "
            f"{REQUIREMENTS} pins"
        )
    state = hooked.state_dict()
    for name, value in weights.items():
        if tuple(state[name].shape) != tuple(value.shape):
            raise RuntimeError(
                f"{name}: transformer-lens expects {tuple(state[name].shape)}, gptwatch gives {tuple(value.shape)}"
            )
        state[name] = value
    hooked.load_state_dict(state, strict=True)
    return hooked.eval()
