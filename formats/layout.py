"""GPT-2's weight layout, which Hugging Face's GPT2LMHeadModel and nanoGPT's model.py share, read into
gptwatch's names: what a file of it must hold for a model of a given config (checked by name and shape
before anything is allocated), whether the model fits in memory, and how each tensor becomes gptwatch's.

Both name the blocks `transformer.h.{n}`, each with `ln_1`, `attn.c_attn` (query, key and value side by
side), `attn.c_proj`, `ln_2`, `mlp.c_fc` and `mlp.c_proj`, then `transformer.ln_f`; the token table
`transformer.wte` is also the output head. They differ in one thing: Hugging Face's `Conv1D` keeps a
weight as [in, out], the transpose of the [out, in] of `nn.Linear`, which nanoGPT and gptwatch use.

| file | gptwatch |
|---|---|
| `transformer.wte`, `transformer.wpe` | `wte`, `wpe` |
| `transformer.h.{n}.ln_1`, `.ln_2` | `blocks.{n}.ln_1`, `.ln_2` |
| `transformer.h.{n}.attn.c_attn` (thirds: query, key, value) | `blocks.{n}.attn.W_query`, `W_key`, `W_value` |
| `transformer.h.{n}.attn.c_proj` | `blocks.{n}.attn.out_proj` |
| `transformer.h.{n}.mlp.c_fc`, `.mlp.c_proj` | `blocks.{n}.mlp.c_fc`, `.mlp.c_proj` |
| `transformer.ln_f` | `ln_f` |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from cli import UserError
from model.config import GPTConfig
from model.gpt import GPT
from model.memory import parameter_count, shortfall, size_text

COMPILED_PREFIX = "_orig_mod."            # torch.compile's wrapper, in the names of a compiled model's state dict
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")   # the causal mask some files carry: a constant, not a weight
HEAD = "lm_head.weight"                   # the output head: the token table again, when tied
TOKENS = "transformer.wte.weight"
BYTES_PER_PARAMETER = 4                   # float32, as gptwatch runs an imported model


class ForeignModelError(UserError):
    """A model from elsewhere (a Hugging Face folder or hub name, a nanoGPT checkpoint) that cannot be read
    as one computing exactly the same function."""


def layout_names(names: Iterable[str]) -> dict[str, str]:
    """{layout name: name in the file} for a file's tensors: torch.compile's `_orig_mod.` prefix dropped, the
    `transformer.` prefix added where a file leaves it out (a GPT2Model's), and the causal-mask buffers and the
    output head left out (`check_tied` reads the head)."""
    stripped = {original: original.removeprefix(COMPILED_PREFIX) for original in names}
    bare = not any(name.startswith("transformer.") for name in stripped.values())
    return {f"transformer.{name}" if bare else name: original for original, name in stripped.items()
            if name != HEAD and not name.endswith(MASK_BUFFERS)}


def expected_shapes(config: GPTConfig, conv1d: bool) -> dict[str, tuple[int, ...]]:
    """Every tensor a file of this layout holds for a model of `config`, by name, with its shape there."""
    E, P, M = config.n_embd, config.block_size, config.mlp_width

    def linear(n_in: int, n_out: int) -> tuple[int, int]:
        return (n_in, n_out) if conv1d else (n_out, n_in)

    shapes = {TOKENS: (config.vocab_size, E), "transformer.wpe.weight": (P, E)}
    norms = ["transformer.ln_f"]
    for n in range(config.n_layer):
        p = f"transformer.h.{n}."
        norms += [p + "ln_1", p + "ln_2"]
        shapes.update({p + "attn.c_attn.weight": linear(E, 3 * E), p + "attn.c_proj.weight": linear(E, E),
                       p + "mlp.c_fc.weight": linear(E, M), p + "mlp.c_proj.weight": linear(M, E)})
        if config.qkv_bias:
            shapes[p + "attn.c_attn.bias"] = (3 * E,)
        if config.bias:
            shapes.update({p + "attn.c_proj.bias": (E,), p + "mlp.c_fc.bias": (M,), p + "mlp.c_proj.bias": (E,)})
    for norm in norms:
        shapes[norm + ".weight"] = (E,)
        if config.bias:
            shapes[norm + ".bias"] = (E,)
    return shapes


def check_tensors(found: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], where: str) -> None:
    """A `ForeignModelError` naming the tensors missing from `found`, those it has beyond `expected`, and those
    of another shape (up to three of each), in one line."""
    def some(names: list[str]) -> str:
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    missing = sorted(set(expected) - set(found), key=_in_order)
    unexpected = sorted(set(found) - set(expected), key=_in_order)
    reshaped = [f"{name} {tuple(found[name])} instead of {expected[name]}" for name in sorted(expected, key=_in_order)
                if name in found and tuple(found[name]) != expected[name]]
    problems = [f"{what} {some(names)}" for what, names in
                (("missing", missing), ("unexpected", unexpected), ("of another shape:", reshaped)) if names]
    if problems:
        raise ForeignModelError(f"{where} does not hold the weights its own config describes ({'; '.join(problems)}); "
                                f"it is damaged or was edited: use the file as it was saved")


def _in_order(name: str) -> tuple:
    """Sorts transformer.h.10 after transformer.h.9."""
    return tuple(int(part) if part.isdigit() else part for part in name.split("."))


def check_tied(read: Callable[[str], torch.Tensor], names: Iterable[str], where: str) -> None:
    """A file that also holds the output head must hold the token table there: gptwatch ties them."""
    head = next((n for n in names if n.removeprefix(COMPILED_PREFIX) == HEAD), None)
    tokens = next((n for n in names if n.removeprefix(COMPILED_PREFIX).removeprefix("transformer.") == "wte.weight"),
                  None)
    if head is None or tokens is None:
        return
    a, b = read(head), read(tokens)
    if a.shape != b.shape or not torch.equal(a, b):
        raise ForeignModelError(f"{where} has an output head ({HEAD}) that is not its token table ({TOKENS}); "
                                f"gptwatch ties the two, so it cannot compute this model: only models with a tied "
                                f"head are read")


def check_fits(config: GPTConfig, what: str, device: torch.device) -> None:
    """Refuses, before anything is downloaded or allocated, a model whose weights alone (float32) exceed the
    memory free here: on the CPU, where it is read, and on `device`, where it runs."""
    n = parameter_count(config)
    need = n * BYTES_PER_PARAMETER
    for where in dict.fromkeys((torch.device("cpu"), device)):
        free = shortfall(need, where)
        if free is not None:
            raise ForeignModelError(f"{what} has {n:,} parameters, which need at least {size_text(need)} of memory "
                                    f"(float32), and {size_text(free)} is free on {where.type}; use a smaller model, "
                                    f"or a machine with more memory")


Reader = Callable[[str], torch.Tensor]


def read_weights(shapes: dict[str, tuple[int, ...]], read: Reader, config: GPTConfig, conv1d: bool,
                 where: str) -> dict[str, torch.Tensor]:
    """gptwatch's state dict for a model of `config` from a file of this layout (`shapes` {name in the file:
    shape}, `read(name in the file)` -> tensor), once every name and shape is checked."""
    names = layout_names(shapes)
    check_tensors({name: shapes[original] for name, original in names.items()}, expected_shapes(config, conv1d),
                  where)
    check_tied(read, shapes, where)

    def tensor(name: str) -> torch.Tensor:
        value = read(names[name])
        if not value.is_floating_point():
            raise ForeignModelError(f"{where}: {name} holds {value.dtype} values, not floating-point weights; it is "
                                    f"damaged or was edited: use the file as it was saved")
        return value.float()

    return gptwatch_weights(tensor, config, conv1d)


def gptwatch_weights(read: Reader, config: GPTConfig, conv1d: bool) -> dict[str, torch.Tensor]:
    """gptwatch's state dict for a model of `config` from the layout's tensors (`read(layout name)`)."""
    def linear(name: str) -> torch.Tensor:
        return read(name).t() if conv1d else read(name)

    E = config.n_embd
    tokens = read(TOKENS)
    weights = {"wte.weight": tokens, "lm_head.weight": tokens,
               "wpe.weight": read("transformer.wpe.weight")}
    renamed = {"ln_1": "ln_1", "ln_2": "ln_2", "attn.c_proj": "attn.out_proj", "mlp.c_fc": "mlp.c_fc",
               "mlp.c_proj": "mlp.c_proj"}
    for n in range(config.n_layer):
        src, dst = f"transformer.h.{n}.", f"blocks.{n}."
        query, key, value = linear(src + "attn.c_attn.weight").split(E, dim=0)
        weights.update({dst + "attn.W_query.weight": query, dst + "attn.W_key.weight": key,
                        dst + "attn.W_value.weight": value})
        if config.qkv_bias:
            query, key, value = read(src + "attn.c_attn.bias").split(E)
            weights.update({dst + "attn.W_query.bias": query, dst + "attn.W_key.bias": key,
                            dst + "attn.W_value.bias": value})
        for theirs, ours in renamed.items():
            weights[dst + ours + ".weight"] = read(src + theirs + ".weight") if "ln" in theirs else \
                linear(src + theirs + ".weight")
            if config.bias:
                weights[dst + ours + ".bias"] = read(src + theirs + ".bias")
    weights["ln_f.weight"] = read("transformer.ln_f.weight")
    if config.bias:
        weights["ln_f.bias"] = read("transformer.ln_f.bias")
    return weights


def built(config: GPTConfig, weights: dict[str, torch.Tensor], device: torch.device) -> GPT:
    """A gptwatch model of `config` holding `weights`, in eval mode on `device`. Built without initialising its
    parameters at random first (a second or more for GPT-2's sizes), since every value comes from `weights`."""
    with torch.device("meta"):
        model = GPT(config)
    model.to_empty(device=torch.device("cpu"))   # allocated, not initialised
    model.lm_head.weight = model.wte.weight       # to_empty gave each its own tensor: tie them again, as GPT does
    model.load_state_dict(weights, strict=True)
    return model.to(device).eval()
