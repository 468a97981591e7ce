"""A gptwatch model as a standard Hugging Face transformers class that computes the same function, so a
`save_pretrained` folder loads with `AutoModelForCausalLM.from_pretrained(folder)`, offline and with no
`trust_remote_code`:

- "gpt2" -> `GPT2LMHeadModel`: the same block. Its `Conv1D` layers keep weights [in, out], the
  transpose of `nn.Linear`'s; `c_attn` is [query | key | value]; `activation_function="gelu"` is the
  exact (erf) GELU gptwatch uses by default, `"gelu_new"` GPT-2's tanh approximation (`activation=
  "gelu_tanh"`); biases gptwatch has not are zeros.
- "modern" -> `Qwen3ForCausalLM` (bias=False only; `formats.parts`): RMSNorm and QK-norm with their
  weights at 1 and float32's eps (what gptwatch's parameter-free `F.rms_norm` uses), rotary base 10000,
  and two exact rewritings:
  - gptwatch rotates interleaved pairs (x[2i], x[2i+1]); Qwen3 rotates halves (x[i], x[i + D/2]).
    Reordering the rows of W_query and W_key inside each head as [0, 2, 4, ..., 1, 3, 5, ...] turns
    one into the other; q·k and the per-head RMS norm do not change under the same reordering of
    both, and values are untouched.
  - ReLU² in Qwen3's gated MLP, down(act(gate·x) * up·x): with gate = up = c_fc and `hidden_act="relu"`,
    relu(h) * h is h² where h > 0 and 0 elsewhere: relu(h)² exactly.

Blocks of attention alone (`attn_only`) keep both classes' MLP, with every weight and bias of it 0: its
output is then exactly 0 (GPT-2's c_proj(gelu(0)) + 0, Qwen3's down(relu(0) * 0)), whatever its norm gives it,
and that norm's weight is 1 (its bias 0), so it stays finite.
"""

from __future__ import annotations

import torch
import torch.nn as nn

import formats.optional as optional
from formats.parts import RMS_EPS, check_supported
from model.attention import ROTARY_BASE
from model.config import GPTConfig
from model.gpt import GPT, LN_EPS

GPT2_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new"}   # gptwatch's activation -> GPT2Config's


def hf_config(config: GPTConfig, eos_token_id: int | None = None):
    """The transformers config of the class standing for `config`'s architecture."""
    transformers = optional.transformers()
    special = dict(bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id,
                   tie_word_embeddings=True)
    if config.modern:
        return transformers.Qwen3Config(
            vocab_size=config.vocab_size, hidden_size=config.n_embd, intermediate_size=config.mlp_width,
            num_hidden_layers=config.n_layer, num_attention_heads=config.n_head, num_key_value_heads=config.n_head,
            head_dim=config.head_dim, hidden_act="relu", max_position_embeddings=config.block_size,
            rms_norm_eps=RMS_EPS, rope_parameters={"rope_type": "default", "rope_theta": float(ROTARY_BASE)},
            attention_bias=False, attention_dropout=0.0, use_sliding_window=False, **special)
    return transformers.GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.block_size, n_embd=config.n_embd, n_layer=config.n_layer,
        n_head=config.n_head, n_inner=config.mlp_width, activation_function=GPT2_ACTIVATIONS[config.activation],
        layer_norm_epsilon=LN_EPS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **special)


def _or_zeros(t: torch.Tensor | None, n: int) -> torch.Tensor:
    return t if t is not None else torch.zeros(n)


def gpt2_weights(model: GPT) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's weights (the tied lm_head left to its embedding) from a "gpt2" model."""
    E = model.config.n_embd
    weights = {"transformer.wte.weight": model.wte.weight, "transformer.wpe.weight": model.wpe.weight,
               "transformer.ln_f.weight": model.ln_f.weight, "transformer.ln_f.bias": _or_zeros(model.ln_f.bias, E)}
    for n, block in enumerate(model.blocks):
        attn, p = block.attn, f"transformer.h.{n}."
        weights.update({
            p + "ln_1.weight": block.ln_1.weight, p + "ln_1.bias": _or_zeros(block.ln_1.bias, E),
            p + "attn.c_attn.weight": attn.fused_projection().t(),
            p + "attn.c_attn.bias": _or_zeros(attn.fused_bias(), 3 * E),
            p + "attn.c_proj.weight": attn.out_proj.weight.t(),
            p + "attn.c_proj.bias": _or_zeros(attn.out_proj.bias, E),
        })
        weights.update({p + name: t for name, t in _gpt2_mlp(block, model.config).items()})
    return weights


def _gpt2_mlp(block: nn.Module, config: GPTConfig) -> dict[str, torch.Tensor]:
    """A block's ln_2 and MLP in GPT2LMHeadModel's names. A block of attention alone has neither: its MLP's
    weights and biases are then 0, so it adds exactly 0, and ln_2's weight 1, so what it reads stays finite."""
    E, M = config.n_embd, config.mlp_width
    if block.mlp is None:
        return {"ln_2.weight": torch.ones(E), "ln_2.bias": torch.zeros(E),
                "mlp.c_fc.weight": torch.zeros(E, M), "mlp.c_fc.bias": torch.zeros(M),
                "mlp.c_proj.weight": torch.zeros(M, E), "mlp.c_proj.bias": torch.zeros(E)}
    mlp = block.mlp
    return {"ln_2.weight": block.ln_2.weight, "ln_2.bias": _or_zeros(block.ln_2.bias, E),
            "mlp.c_fc.weight": mlp.c_fc.weight.t(), "mlp.c_fc.bias": _or_zeros(mlp.c_fc.bias, M),
            "mlp.c_proj.weight": mlp.c_proj.weight.t(), "mlp.c_proj.bias": _or_zeros(mlp.c_proj.bias, E)}


def halves_order(head_dim: int) -> torch.Tensor:
    """[0, 2, 4, ..., 1, 3, 5, ...]: the rows of a head's query or key that make Qwen3's rotation of
    halves rotate gptwatch's interleaved pairs."""
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


def qwen3_weights(model: GPT) -> dict[str, torch.Tensor]:
    """Qwen3ForCausalLM's weights (the tied lm_head left to its embedding) from a "modern" model without biases."""
    cfg = model.config
    H, D, E = cfg.n_head, cfg.head_dim, cfg.n_embd
    order = halves_order(D)

    def rotated_rows(weight: torch.Tensor) -> torch.Tensor:
        return weight.reshape(H, D, E)[:, order].reshape(H * D, E)

    weights = {"model.embed_tokens.weight": model.wte.weight, "model.norm.weight": torch.ones(E)}
    for n, block in enumerate(model.blocks):
        attn, p = block.attn, f"model.layers.{n}."
        # Attention alone: an MLP of zeros adds exactly 0 (and post_attention_layernorm is weight 1 anyway).
        fc = block.mlp.c_fc.weight if block.mlp is not None else torch.zeros(cfg.mlp_width, E)
        proj = block.mlp.c_proj.weight if block.mlp is not None else torch.zeros(E, cfg.mlp_width)
        weights.update({
            p + "input_layernorm.weight": torch.ones(E), p + "post_attention_layernorm.weight": torch.ones(E),
            p + "self_attn.q_proj.weight": rotated_rows(attn.W_query.weight),
            p + "self_attn.k_proj.weight": rotated_rows(attn.W_key.weight),
            p + "self_attn.v_proj.weight": attn.W_value.weight, p + "self_attn.o_proj.weight": attn.out_proj.weight,
            p + "self_attn.q_norm.weight": torch.ones(D), p + "self_attn.k_norm.weight": torch.ones(D),
            p + "mlp.gate_proj.weight": fc, p + "mlp.up_proj.weight": fc, p + "mlp.down_proj.weight": proj,
        })
    return weights


def to_hf_model(model: GPT, eos_token_id: int | None = None):
    """A transformers model (GPT2LMHeadModel or Qwen3ForCausalLM) computing what `model` computes, on the
    CPU in float32. Raises `Unsupported` naming the part for a model no standard class holds exactly."""
    check_supported(model.config, "hf")
    transformers = optional.transformers()
    config = hf_config(model.config, eos_token_id)
    cls = transformers.Qwen3ForCausalLM if model.config.modern else transformers.GPT2LMHeadModel
    hf = cls(config)
    weights = qwen3_weights(model) if model.config.modern else gpt2_weights(model)
    weights = {name: t.detach().float().cpu().contiguous().clone() for name, t in weights.items()}
    missing, unexpected = hf.load_state_dict(weights, strict=False)
    if unexpected or set(missing) != {"lm_head.weight"}:
        raise RuntimeError(f"{cls.__name__} of this transformers version does not fit gptwatch's weights (missing "
                           f"{sorted(missing)}, unexpected {sorted(unexpected)}); use the version that "
                           f"{optional.REQUIREMENTS} pins")
    hf.tie_weights()
    if hf.get_output_embeddings().weight.data_ptr() != hf.get_input_embeddings().weight.data_ptr():
        raise RuntimeError(f"{cls.__name__}'s output head is not tied to its embedding here")
    return hf.eval()
