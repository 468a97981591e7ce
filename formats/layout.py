"""Where gptwatch's weights stand in another library's layout, one table of `Row`s per layout, read both ways:
exporting (`written`) and importing (`read_back`) use the same rows, so reading what was written gives the same
weights: GPT-2's (Hugging Face's and nanoGPT's files), Qwen3's (Hugging Face's, for the modern architecture) and
TransformerLens's. What a format cannot hold exactly, its own module refuses (`check_supported`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from formats.checkpoint import check_finite, tensor_problem
from formats.format import CheckpointError
from model.config import GPTConfig
from model.gpt import GPT

COMPILED_PREFIX = "_orig_mod."  # torch.compile's wrapper, in the names of a compiled model's state dict
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask some files carry: a constant, not a weight
HEAD = "lm_head.weight"  # the output head: the token table again, when tied
TOKENS = "transformer.wte.weight"
EDITED = "it is damaged or was edited: use the file as it was saved"

Reader = Callable[[str], torch.Tensor]
# The model's RMSNorm and QK-norm pass no eps, so F.rms_norm uses the input's: float32's, as exported.
RMS_EPS = torch.finfo(torch.float32).eps


@dataclass(frozen=True)
class Row:
    """One tensor of a layout (`theirs`), made of gptwatch's tensors `ours` by `out`; `back` undoes `out` (None for
    a constant or a second copy of a tensor)."""

    theirs: str
    ours: tuple[str, ...]
    out: Callable[..., torch.Tensor]
    back: Callable[[torch.Tensor], tuple[torch.Tensor, ...]] | None = None


def same(theirs: str, ours: str, transpose: bool = False) -> Row:
    if transpose:
        return Row(theirs, (ours,), lambda t: t.t(), lambda t: (t.t(),))
    return Row(theirs, (ours,), lambda t: t, lambda t: (t,))


def constant(theirs: str, value: float, *shape: int) -> Row:
    return Row(theirs, (), lambda: torch.full(shape, float(value)))


def joined(theirs: str, ours: tuple[str, ...], width: int, transpose: bool = False) -> Row:
    """`ours` one after the other along the output dimension (query, key and value in one matrix)."""

    def out(*parts: torch.Tensor) -> torch.Tensor:
        return torch.cat(parts).t() if transpose else torch.cat(parts)

    return Row(theirs, ours, out, lambda t: tuple((t.t() if transpose else t).split(width)))


def written(rows: Iterable[Row], state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The layout's tensors, by name, from gptwatch's state dict: float32 copies on the CPU, each its own."""
    return {
        row.theirs: row.out(*(state[name] for name in row.ours)).detach().float().cpu().contiguous().clone()
        for row in rows
    }


def read_back(rows: Iterable[Row], read: Reader) -> dict[str, torch.Tensor]:
    """gptwatch's tensors, by name, from the layout's (`read(name)`); rows without `back` are not read."""
    out = {}
    for row in rows:
        if row.back is not None:
            out.update(zip(row.ours, row.back(read(row.theirs)), strict=True))
    return out


# --- the layouts ---------------------------------------------------------------------------------------------


def _bias(theirs: str, ours: str, present: bool, n: int) -> Row:
    return same(theirs, ours) if present else constant(theirs, 0, n)


def _norm(rows: list[Row], theirs: tuple[str, str], ours: str, config: GPTConfig, present: bool = True) -> None:
    """A LayerNorm's weight and bias; weight 1 and bias 0 where gptwatch has no norm (an attention-only block's)."""
    weight, bias = theirs
    rows.append(same(weight, ours + ".weight") if present else constant(weight, 1, config.n_embd))
    rows.append(_bias(bias, ours + ".bias", present and config.bias, config.n_embd))


def _linear(
    rows: list[Row], theirs: str, ours: str | None, bias: bool, shape: tuple[int, int], transpose: bool
) -> None:
    """A linear layer's weight ([out, in] in gptwatch) and bias; zeros where gptwatch has none (`ours` None)."""
    n_out, n_in = shape
    rows.append(
        same(theirs + ".weight", ours + ".weight", transpose)
        if ours
        else constant(theirs + ".weight", 0, *((n_in, n_out) if transpose else shape))
    )
    rows.append(_bias(theirs + ".bias", f"{ours}.bias", bool(ours) and bias, n_out))


def gpt2_layout(config: GPTConfig, conv1d: bool = True) -> list[Row]:
    """GPT-2's layout for a "gpt2" model of `config`: Conv1D weights [in, out] with `conv1d`, as Hugging Face keeps
    them; nn.Linear's [out, in] without, as nanoGPT and gptwatch do. The token table is also the output head."""
    E, M = config.n_embd, config.mlp_width
    rows = [same(TOKENS, "wte.weight"), same("transformer.wpe.weight", "wpe.weight")]
    for n in range(config.n_layer):
        h, b = f"transformer.h.{n}.", f"blocks.{n}."
        mlp = not config.attn_only
        _norm(rows, (h + "ln_1.weight", h + "ln_1.bias"), b + "ln_1", config)
        qkv = tuple(f"{b}attn.W_{part}" for part in ("query", "key", "value"))
        rows.append(joined(h + "attn.c_attn.weight", tuple(p + ".weight" for p in qkv), E, conv1d))
        rows.append(
            joined(h + "attn.c_attn.bias", tuple(p + ".bias" for p in qkv), E)
            if config.qkv_bias
            else constant(h + "attn.c_attn.bias", 0, 3 * E)
        )
        _linear(rows, h + "attn.c_proj", b + "attn.out_proj", config.bias, (E, E), conv1d)
        _norm(rows, (h + "ln_2.weight", h + "ln_2.bias"), b + "ln_2", config, present=mlp)
        _linear(rows, h + "mlp.c_fc", b + "mlp.c_fc" if mlp else None, config.bias, (M, E), conv1d)
        _linear(rows, h + "mlp.c_proj", b + "mlp.c_proj" if mlp else None, config.bias, (E, M), conv1d)
    _norm(rows, ("transformer.ln_f.weight", "transformer.ln_f.bias"), "ln_f", config)
    return rows


def qwen3_layout(config: GPTConfig) -> list[Row]:
    """Qwen3ForCausalLM's layout for a "modern" model of `config` without biases: norms of weight 1, the gated MLP
    with gate = up = c_fc, and the rows of each head's query and key in the order [0, 2, 4, ..., 1, 3, 5, ...],
    which makes Qwen3's rotation of halves rotate gptwatch's interleaved pairs (formats/huggingface.py: why)."""
    H, D, E, M = config.n_head, config.head_dim, config.n_embd, config.mlp_width
    order = torch.cat((torch.arange(0, D, 2), torch.arange(1, D, 2)))
    undo = torch.argsort(order)

    def rotated(theirs: str, ours: str) -> Row:
        return Row(
            theirs,
            (ours,),
            lambda w: w.reshape(H, D, E)[:, order].reshape(H * D, E),
            lambda w: (w.reshape(H, D, E)[:, undo].reshape(H * D, E),),
        )

    rows = [same("model.embed_tokens.weight", "wte.weight"), constant("model.norm.weight", 1, E)]
    for n in range(config.n_layer):
        p, b = f"model.layers.{n}.", f"blocks.{n}."
        rows += [
            constant(p + "input_layernorm.weight", 1, E),
            constant(p + "post_attention_layernorm.weight", 1, E),
            rotated(p + "self_attn.q_proj.weight", b + "attn.W_query.weight"),
            rotated(p + "self_attn.k_proj.weight", b + "attn.W_key.weight"),
            same(p + "self_attn.v_proj.weight", b + "attn.W_value.weight"),
            same(p + "self_attn.o_proj.weight", b + "attn.out_proj.weight"),
            constant(p + "self_attn.q_norm.weight", 1, D),
            constant(p + "self_attn.k_norm.weight", 1, D),
        ]
        if config.attn_only:  # an MLP of zeros adds exactly 0
            rows += [
                constant(p + f"mlp.{name}.weight", 0, *shape)
                for name, shape in (("gate_proj", (M, E)), ("up_proj", (M, E)), ("down_proj", (E, M)))
            ]
        else:  # gate and up are both c_fc: reading back takes it from up_proj
            rows += [
                Row(p + "mlp.gate_proj.weight", (b + "mlp.c_fc.weight",), lambda w: w),
                same(p + "mlp.up_proj.weight", b + "mlp.c_fc.weight"),
                same(p + "mlp.down_proj.weight", b + "mlp.c_proj.weight"),
            ]
    return rows


def hooked_layout(config: GPTConfig) -> list[Row]:
    """TransformerLens's layout for a model of `config`: every parameter of the HookedTransformer (W_Q/W_K/W_V per
    head [head, d_model, d_head], W_O [head, d_head, d_model], the MLP and W_U [in, out]), zeros for the biases
    gptwatch has not and ones for the QK-norm's weights (gptwatch's is weight-free)."""
    H, D, E, M, V = config.n_head, config.head_dim, config.n_embd, config.mlp_width, config.vocab_size

    def per_head(theirs: str, ours: str) -> Row:  # [H*D, E] -> [H, E, D]
        return Row(
            theirs,
            (ours,),
            lambda w: w.reshape(H, D, E).transpose(1, 2),
            lambda w: (w.transpose(1, 2).reshape(H * D, E),),
        )

    def head_bias(theirs: str, ours: str, present: bool) -> Row:
        return (
            Row(theirs, (ours,), lambda b: b.reshape(H, D), lambda b: (b.reshape(H * D),))
            if present
            else constant(theirs, 0, H, D)
        )

    rows = [
        same("embed.W_E", "wte.weight"),
        same("unembed.W_U", "wte.weight", transpose=True),
        constant("unembed.b_U", 0, V),
    ]
    if not config.modern:
        rows.append(same("pos_embed.W_pos", "wpe.weight"))
        _norm(rows, ("ln_final.w", "ln_final.b"), "ln_f", config)
    for n in range(config.n_layer):
        p, b = f"blocks.{n}.", f"blocks.{n}."
        for letter, name in (("Q", "W_query"), ("K", "W_key"), ("V", "W_value")):
            rows += [
                per_head(f"{p}attn.W_{letter}", f"{b}attn.{name}.weight"),
                head_bias(f"{p}attn.b_{letter}", f"{b}attn.{name}.bias", config.qkv_bias),
            ]
        rows.append(
            Row(
                p + "attn.W_O",
                (b + "attn.out_proj.weight",),
                lambda w: w.t().reshape(H, D, E),
                lambda w: (w.reshape(H * D, E).t(),),
            )
        )
        rows.append(_bias(p + "attn.b_O", b + "attn.out_proj.bias", config.bias, E))
        if not config.attn_only:  # an attention-only block has neither the MLP nor ln2
            rows += [
                same(p + "mlp.W_in", b + "mlp.c_fc.weight", transpose=True),
                _bias(p + "mlp.b_in", b + "mlp.c_fc.bias", config.bias, M),
                same(p + "mlp.W_out", b + "mlp.c_proj.weight", transpose=True),
                _bias(p + "mlp.b_out", b + "mlp.c_proj.bias", config.bias, E),
            ]
        if config.modern:
            rows += [constant(p + "attn.q_norm.w", 1, D), constant(p + "attn.k_norm.w", 1, D)]
        else:
            _norm(rows, (p + "ln1.w", p + "ln1.b"), b + "ln_1", config)
            if not config.attn_only:
                _norm(rows, (p + "ln2.w", p + "ln2.b"), b + "ln_2", config)
    return rows


# --- reading a file of GPT-2's layout ------------------------------------------------------------------------


def layout_names(names: Iterable[str], where: str) -> dict[str, str]:
    """{layout name: name in the file}, `transformer.` added where a file leaves it out (a GPT2Model's), the causal
    mask and the output head left out. One weight under two names is refused: which is meant?"""
    stripped = {original: original.removeprefix(COMPILED_PREFIX) for original in names}
    bare = not any(name.startswith("transformer.") for name in stripped.values())
    out: dict[str, str] = {}
    for original, name in stripped.items():
        name = f"transformer.{name}" if bare else name
        if name in out:
            raise CheckpointError(f"{where} holds {name} twice, as {out[name]} and as {original}; {EDITED}")
        if name != HEAD and not name.endswith(MASK_BUFFERS):
            out[name] = original
    return out


def read_state(state: object, config: GPTConfig, conv1d: bool, where: str, refusal: str) -> dict[str, torch.Tensor]:
    """`read_weights` of a state dict read whole (a PyTorch file's), `refusal` when it is none (named tensors)."""
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(t) for k, t in state.items()):
        raise CheckpointError(refusal)
    return read_weights({name: tuple(t.shape) for name, t in state.items()}, state.__getitem__, config, conv1d, where)


def read_weights(
    shapes: dict[str, tuple[int, ...]], read: Reader, config: GPTConfig, conv1d: bool, where: str
) -> dict[str, torch.Tensor]:
    """gptwatch's state dict for a model of `config` from a file of GPT-2's layout (`shapes` {name in the file:
    shape}, `read(name in the file)` -> tensor), once every name and shape is checked."""
    names = layout_names(shapes, where)
    if config.n_layer > len(names):  # bounded before any work that grows with it (the table of names below)
        raise CheckpointError(
            f"{where}: its config says {config.n_layer:,} layers, and the file holds {len(names):,} "
            f"tensors in all; {EDITED}"
        )
    rows = gpt2_layout(config, conv1d)
    with torch.device("meta"):  # the model's own shapes, nothing allocated
        state = GPT(config).state_dict()
    expected = {row.theirs: tuple(row.out(*(state[name] for name in row.ours)).shape) for row in rows if row.ours}
    found = {name: shapes[original] for name, original in names.items()}

    def some(listed: list[str]) -> str:
        return ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")

    def in_order(name: str) -> tuple:  # transformer.h.10 after transformer.h.9
        return tuple(int(part) if part.isdigit() else part for part in name.split("."))

    missing = sorted(set(expected) - set(found), key=in_order)
    unexpected = sorted(set(found) - set(expected), key=in_order)
    reshaped = [
        f"{name} {tuple(found[name])} instead of {expected[name]}"
        for name in sorted(expected, key=in_order)
        if name in found and tuple(found[name]) != expected[name]
    ]
    problems = [
        f"{what} {some(listed)}"
        for what, listed in (("missing", missing), ("unexpected", unexpected), ("of another shape:", reshaped))
        if listed
    ]
    if problems:  # up to three of each
        raise CheckpointError(
            f"{where} does not hold the weights its own config describes ({'; '.join(problems)}); {EDITED}"
        )
    # a file that also holds the output head must hold the token table there: gptwatch ties them
    head = next((n for n in shapes if n.removeprefix(COMPILED_PREFIX) == HEAD), None)
    a, b = (read(head), read(names[TOKENS])) if head is not None else (None, None)
    if a is not None and (a.shape != b.shape or not torch.equal(a, b)):
        raise CheckpointError(
            f"{where} has an output head ({HEAD}) that is not its token table ({TOKENS}); "
            f"gptwatch ties the two, so it cannot compute this model: only models with a tied "
            f"head are read"
        )

    def tensor(name: str) -> torch.Tensor:
        value = read(names[name])
        problem = tensor_problem(value)
        if problem is not None:
            raise CheckpointError(f"{where}: {name} {problem}; {EDITED}")
        value = value.float()  # a float16 or float64 weight beyond float32's range becomes inf here
        check_finite({name: value}, where, "use an intact copy")
        return value

    weights = read_back(rows, tensor)
    weights[HEAD] = weights["wte.weight"]
    return weights
