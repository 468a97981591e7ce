"""The model's settings, `GPTConfig`: the one place a model option is declared, with its default, its meaning
and its rules. A training config holds one (`config.TrainConfig.model`), so each option is a config key
(`--n_layer=2`, `n_layer = 2` in TOML) that `--help` explains in the words written here, and a checkpoint
records it: nothing else lists the model's options. Each field's metadata:
- `help`: its meaning, for `--help`. A field without one is no config key: the data decides it (`vocab_size`),
  or a model trained elsewhere brings it (`qkv_bias`, `activation`, `vocab_used`).
- `always`: a checkpoint records it whatever its value, as every checkpoint since the first has; a later
  option only when it differs from its default, so a checkpoint from before it reads as one with it off.
- `shown`: the words that name a switch that is on, in the line a run starts with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from common.cli import option

ARCHITECTURES = ("gpt2", "modern")
ACTIVATIONS = ("gelu", "gelu_tanh")  # the exact (erf) GELU, or GPT-2's tanh approximation of it
MAX_BLOCK_SIZE = 2**24  # positions beyond it: float32 (rotary angles) no longer tells them apart
MAX_SIZE = 2**31 - 1  # no size of a model is larger: torch counts some of them in 32 bits


def _shown(value: object) -> object:
    """A value for a message: a whole number of more digits than a line can hold is said by its length."""
    return f"a number of {len(str(value)):,} digits" if isinstance(value, int) and abs(value) >= 10**24 else value


@dataclass
class GPTConfig:
    """The model's sizes and options; `validate` is the one place their rules live."""

    vocab_size: int | None = option(None, always=True)  # None: not known yet (a training config's model)
    arch: str = option(
        "gpt2", "gpt2 (classic, for teaching) or modern (rotary, QK-norm, RMSNorm, ReLU²)", ARCHITECTURES, always=True
    )
    n_layer: int = option(4, "transformer blocks", always=True)
    n_head: int = option(4, "attention heads per block", always=True)
    n_embd: int = option(128, "embedding width (a multiple of n_head)", always=True)
    block_size: int = option(64, "context length in tokens", always=True)
    dropout: float = option(0.0, "dropout probability", always=True)
    bias: bool = option(False, "biases in norms, projections and MLPs", always=True)
    attn_only: bool = option(
        False,
        "blocks of attention alone, without MLPs (the attention-only toy models of Elhage et al. 2021)",
        shown="attention only",
    )
    relative_positions: bool = option(
        False,
        "arch gpt2: positions as a learned bias per head and distance in each "
        "attention layer (Shaw et al. 2018, T5), not GPT-2's table of learned "
        "positions",
        shown="relative positions",
    )
    # What only a model trained elsewhere brings (GPT-2's weights, nanoGPT's): no config key sets them.
    qkv_bias: bool = option(False)  # biases in the query, key and value projections
    activation: str = option("gelu")  # the MLP's GELU: "gelu" (exact) or "gelu_tanh" (GPT-2's approximation)
    vocab_used: int | None = option(None)  # rows from here on pad the vocabulary: no token, never sampled

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first impossible value and what would do."""
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if name == "vocab_size" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"'{name}' must be a positive integer; got {_shown(value)}")
            if value > MAX_SIZE:  # a size read from a file is bounded before anything is counted or built with it
                raise ValueError(f"'{name}' must be at most {MAX_SIZE:,}; got {_shown(value)}")
        if self.n_embd % self.n_head:
            multiple = self.n_head * (self.n_embd // self.n_head + 1)
            raise ValueError(
                f"'n_embd' must be a multiple of 'n_head' ({self.n_head}), so every head gets an "
                f"equal share; got {self.n_embd}, e.g. use {multiple}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"'dropout' must be in [0, 1); got {self.dropout}")
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"'arch' must be one of {', '.join(ARCHITECTURES)}; got {self.arch!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"'activation' must be one of {', '.join(ACTIVATIONS)}; got {self.activation!r}")
        if self.modern and self.relative_positions:
            raise ValueError(
                "'relative_positions' is an option of arch gpt2: modern encodes positions by rotating "
                "queries and keys (rotary); use arch gpt2 with relative_positions, or modern without"
            )
        if self.modern and (self.qkv_bias or self.activation != "gelu"):
            raise ValueError(
                "'qkv_bias' and 'activation' are settings of arch gpt2 (modern has no query, key or "
                "value biases and uses ReLU²)"
            )
        used = self.vocab_used
        if used is not None and (type(used) is not int or self.vocab_size is None or not 0 < used <= self.vocab_size):
            raise ValueError(
                f"'vocab_used' must be a positive integer up to vocab_size ({self.vocab_size}); got {self.vocab_used!r}"
            )
        # The sizes a model of this architecture cannot have, however much memory there is:
        if self.block_size > MAX_BLOCK_SIZE:
            raise ValueError(
                f"'block_size' must be at most {MAX_BLOCK_SIZE:,} (2**24: positions are counted in "
                f"float32, exact only that far); got {self.block_size:,}"
            )
        if self.modern and self.head_dim % 2:  # rotary positions turn each head's features in pairs
            fits = [h for h in range(self.n_head, 0, -1) if self.n_embd % (2 * h) == 0]
            fix = f"n_head={fits[0]}" if fits else f"n_embd={2 * self.n_embd}"
            raise ValueError(
                f"'n_head' must leave each head an even number of features for arch 'modern', whose "
                f"rotary positions turn them in pairs; n_embd {self.n_embd} / n_head {self.n_head} "
                f"gives {self.head_dim}: e.g. use {fix}"
            )

    @property
    def modern(self) -> bool:
        return self.arch == "modern"

    @property
    def absolute_positions(self) -> bool:
        """Whether the model has GPT-2's learned position table (`GPT.wpe`): "gpt2" without relative_positions."""
        return not self.modern and not self.relative_positions

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_width(self) -> int:
        """The MLP's hidden width: four times the embedding, as in GPT-2."""
        return 4 * self.n_embd

    def options(self) -> str:
        """The architecture and the switches that are on, in words: "gpt2, attention only, relative positions"."""
        switches = [f.metadata.get("shown") for f in fields(self) if getattr(self, f.name)]
        return ", ".join([self.arch, *filter(None, switches)])

    def to_dict(self) -> dict:
        """Every setting a checkpoint records: those `always` recorded, the others only where they differ from
        their defaults, so a model without them is described as it always was."""
        return {
            name: value for name, value in asdict(self).items() if name in ALWAYS_RECORDED or value != _DEFAULTS[name]
        }


_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
ALWAYS_RECORDED = tuple(f.name for f in fields(GPTConfig) if f.metadata.get("always"))
CONFIG_KEYS = tuple(f.name for f in fields(GPTConfig) if f.metadata["help"])  # what a training config sets
IMPORTED_FIELDS = tuple(f.name for f in fields(GPTConfig) if f.name not in (*CONFIG_KEYS, "vocab_size"))
# What a model decides whatever run trains it: resumed, or fine-tuned, it keeps them (a smaller block_size crops its
# positions; dropout is each run's own).
MODEL_KEYS = tuple(name for name in CONFIG_KEYS if name not in ("block_size", "dropout"))
