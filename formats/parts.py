"""Which part of a gptwatch model an export target has no exact equivalent for: the one place an export
is refused, so an export either computes the same function or does not happen.

Every part and what stands for it (checked against transformer-lens 3.9 and transformers 5.24):

| part | TransformerLens (`HookedTransformerConfig`) | Hugging Face |
|---|---|---|
| gpt2: LayerNorm (eps 1e-5, bias or none) | `normalization_type="LN"`, zero bias if none | GPT2LMHeadModel, zero bias |
| gpt2: learned positions | `positional_embedding_type="standard"` | `wpe` |
| gpt2: a learned bias per head and distance (`relative_positions`) | **none**: refused | **none**: refused |
| gpt2: exact (erf) GELU | `act_fn="gelu"` | `activation_function="gelu"` |
| gpt2: GPT-2's tanh GELU (`activation="gelu_tanh"`) | `act_fn="gelu_new"` | `activation_function="gelu_new"` |
| gpt2: query/key/value biases (`qkv_bias`) | `b_Q`, `b_K`, `b_V` | `c_attn.bias` |
| modern: parameter-free RMSNorm (float32's eps) | `normalization_type="RMSPre"`, `eps` | Qwen3ForCausalLM, weights 1 |
| modern: QK-norm before rotary | `use_qk_norm`, its weights 1 | `q_norm`/`k_norm`, weights 1 |
| modern: rotary on interleaved pairs, base 10000 | `rotary_adjacent_pairs=True` | q/k rows permuted per head |
| modern: ReLU² MLP | `act_fn="relu2"` | gated MLP, gate = up = c_fc, `relu` |
| modern: biases (MLP, attention output) | `b_in`, `b_out`, `b_O` | **none**: refused |
| no query/key/value biases, tied output head | zero `b_Q/b_K/b_V`, `W_U` = `W_E`ᵀ | zero biases, tied |
| padding rows of the vocabulary (`vocab_used`) | rows of `W_E`/`W_U` like any other | the same |
| blocks of attention alone (`attn_only`) | `attn_only=True` | an MLP of zeros (adds exactly 0), its norm's weight 1 |

TransformerLens's positions are learned absolute, rotary, shortformer or ALiBi (a fixed slope per head, not
learned per distance), and Hugging Face's GPT-2 and Qwen3 have a table or rotary: none holds a learned bias per
head and distance.
"""

from __future__ import annotations

import torch

from cli import UserError
from model.config import GPTConfig

TARGETS = {"tl": "TransformerLens", "hf": "Hugging Face"}
# The model's RMSNorm and QK-norm pass no eps, so F.rms_norm uses the input's: float32's, as exported.
RMS_EPS = torch.finfo(torch.float32).eps


def refusal(config: GPTConfig, target: str) -> str | None:
    """Why a model of `config` cannot go to `target` exactly, naming the part; None when every part can."""
    if target not in TARGETS:
        raise ValueError(f"unknown export target {target!r}; one of {', '.join(TARGETS)}")
    if config.relative_positions:
        kinds = ("learned absolute, rotary, shortformer and ALiBi positions" if target == "tl" else
                 "GPT-2's learned position table and Qwen3's rotary positions")
        return (f"cannot export this model to {TARGETS[target]} exactly: its positions are a learned bias per head "
                f"and distance in each attention layer (relative_positions=true), and {TARGETS[target]} has "
                f"{kinds}, none of them that; to export, train with --relative_positions=false")
    if target == "hf" and config.modern and config.bias:
        return ("cannot export this model to Hugging Face exactly: the modern architecture goes to Qwen3ForCausalLM, "
                "whose MLP (c_fc, c_proj) and attention output (out_proj) have no biases, and this model has them "
                "(bias=true); export it to TransformerLens (--export tl FILE), or train with --bias=false")
    return None


class Unsupported(UserError):
    """A model with a part the target has no exact equivalent for."""


def check_supported(config: GPTConfig, target: str) -> None:
    """Raises `Unsupported` with `refusal`'s line when `target` cannot hold a model of `config` exactly."""
    why = refusal(config, target)
    if why is not None:
        raise Unsupported(why)
