"""Where a run's settings start before its command line: which base applies, and the base chosen for a
user's own text.

- A config file given (`python train.py CONFIG.toml`): that file alone, on the built-in defaults.
- No config file, and `--dataset` names real text (a file, or one of the named corpora
  shakespeare, tinystories, tinystories_lower): settings chosen here for that text, scaled to its size
  and to a few minutes on a laptop CPU (`settings_for_text`), printed in one line at the start.
  Resumed (`--resume`), the model's shape and tokenizer are the checkpoint's.
- Otherwise (no arguments, or a generated corpus): `configs/pronouns.toml`, the demo.

Keys given on the command line win over any base.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli import UserError
from config import RESUME, SCRATCH, TrainConfig, read_toml
from data import corpora
from model.config import CONFIG_KEYS

REPO = Path(__file__).resolve().parent.parent
DEMO_CONFIG = REPO / "configs" / "pronouns.toml"
DEFAULT_VAL_FRACTION = TrainConfig.__dataclass_fields__["val_fraction"].default

# The shape of the model chosen for real text, its size decided by how much text there is. The
# classic block keeps each head readable; 2 layers let one head feed another (an induction head
# needs a head in an earlier layer), 4 heads a layer keep the head table short.
SMALL_TEXT = 50_000       # tokens: below this, a smaller model that memorises less
BLOCK = 64                # tokens of context: a sentence or two of characters, a paragraph of BPE tokens
BATCH = 16
STEPS = 2000              # at most: about 3 minutes on a 2-core laptop CPU at the size below
MIN_STEPS = 200
EPOCHS = 10               # at most this many passes over the training text, so a short text is not memorised
CHARS_PER_TOKEN = {"char": 1.0, "gpt2": 4.0}   # GPT-2's BPE: about 4 characters of English a token
SIZES = {
    "small": {"n_layer": 2, "n_head": 4, "n_embd": 64, "dropout": 0.1},
    "default": {"n_layer": 2, "n_head": 4, "n_embd": 128, "dropout": 0.0},
}


@dataclass(frozen=True)
class StartingPoint:
    """The settings a run starts from: a config file (`config_path`), or `settings` chosen here for a text
    (`text`: its file name and length; `shape_from`: the checkpoint its shape comes from), then the command
    line on top. `name` names the TensorBoard run."""

    config_path: str | None
    settings: dict[str, Any]
    name: str
    text: tuple[str, int] | None = None
    shape_from: str | None = None

    def line(self, cfg: TrainConfig) -> str | None:
        """The one line printed at the start when settings were chosen for a text: what the run will use (the
        command line's keys included) and how to change it; None otherwise."""
        if self.text is None:
            return None
        file_name, characters = self.text
        m = cfg.model
        model = (f"model shape from {self.shape_from}" if self.shape_from else
                 f"{_count(m.n_layer, 'layer')} x {_count(m.n_head, 'head')} x {m.n_embd} dims")
        return (f"settings chosen for {file_name} ({characters:,} characters): {cfg.tokenizer} tokenizer, {model}, "
                f"block {m.block_size}, {cfg.max_iters:,} steps of {cfg.batch_size * m.block_size:,} tokens, "
                f"checkpoint in {cfg.out_dir}; change any with --key=value (e.g. --max_iters={2 * cfg.max_iters}), "
                f"or give a config file to replace them all; every key: python train.py --help")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def starting_point(config_path: str | None, overrides: dict[str, Any]) -> StartingPoint:
    """Which base applies (see the module's docstring), for a command line of `config_path` and `overrides`."""
    if config_path is not None:
        return StartingPoint(config_path, {}, Path(config_path).stem)
    if overrides.get("init_from", SCRATCH) not in (SCRATCH, RESUME):  # a model to fine-tune: its shape, the
        return StartingPoint(None, {}, "default")                   # built-in training settings
    dataset = overrides.get("dataset")
    if dataset is None or dataset in corpora.GENERATED or not str(dataset).strip():
        return StartingPoint(str(DEMO_CONFIG) if DEMO_CONFIG.is_file() else None, {}, "default")
    text = _text_of(dataset)
    name = Path(dataset).stem if not corpora.is_named(dataset) else dataset
    shape, tokenizer, source = None, overrides.get("tokenizer"), None
    if overrides.get("resume"):
        out_dir = overrides.get("out_dir") or out_dir_for(name)
        shape, saved_tokenizer = checkpoint_shape(Path(out_dir) / "ckpt.pt")
        tokenizer = tokenizer or saved_tokenizer
        source = f"{Path(out_dir) / 'ckpt.pt'}" if shape is not None else None
    chosen = settings_for_text(len(text), name, tokenizer=tokenizer, shape=shape,
                               val_fraction=overrides.get("val_fraction", DEFAULT_VAL_FRACTION),
                               sample_prompt="\n" if "\n" in text or not text else text[0])
    return StartingPoint(None, chosen, name, (Path(dataset).name, len(text)), source)


def _text_of(dataset: str) -> str:
    """The text of a file or named corpus, read as preparing it reads it (so a missing or unreadable file is the
    same one-line error, before anything is printed)."""
    from data.prepare import source_text

    return source_text(dataset, 0)[0]


def out_dir_for(name: str) -> str:
    """out/NAME for a text called NAME, never a folder that one of configs/ writes to (a text called
    pronouns.txt must not replace the demo's checkpoint)."""
    taken = set()
    for config in (REPO / "configs").glob("*.toml"):
        try:
            taken.add(Path(read_toml(config).get("out_dir", "")).name)
        except UserError:
            continue
    return f"out/{name}" if name not in taken else f"out/{name}-text"


def checkpoint_shape(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the model shape, the tokenizer) a checkpoint was trained with; (None, None) when there is no readable
    checkpoint there (resuming then says why)."""
    from formats import load_checkpoint

    try:
        saved = load_checkpoint(path).get("train_config")
    except UserError:
        return None, None
    if not isinstance(saved, dict):
        return None, None
    shape = {key: saved[key] for key in CONFIG_KEYS if key in saved}
    tokenizer = saved.get("tokenizer")
    return shape, tokenizer if isinstance(tokenizer, str) else None


def settings_for_text(characters: int, name: str, *, tokenizer: str | None = None,
                      shape: dict[str, Any] | None = None, val_fraction: float = 0.1,
                      sample_prompt: str = "\n") -> dict[str, Any]:
    """The base settings for a text of `characters` characters called `name`: the tokenizer (char unless
    `tokenizer` fixes it), the model's shape (unless `shape` fixes it: a checkpoint resumed, or a model
    imported), the block, the steps and the intervals, and out/NAME.

    The steps are at most STEPS (a few minutes on a laptop CPU) and at most EPOCHS passes over the
    training text; a text under SMALL_TEXT tokens gets a smaller model with dropout; a text too short
    for the block gets a shorter block, down to 8 tokens (preparing a shorter text says why it cannot)."""
    tokenizer = tokenizer or "char"
    tokens = characters / CHARS_PER_TOKEN.get(tokenizer, 1.0)
    out: dict[str, Any] = {"tokenizer": tokenizer}
    if shape is None:
        block = BLOCK
        while block > 8 and tokens * val_fraction < block + 2:   # the val split must hold a window
            block //= 2
        out.update(arch="gpt2", bias=False, block_size=block, **SIZES["small" if tokens < SMALL_TEXT else "default"])
    else:
        out.update(shape)
        block = shape.get("block_size", BLOCK)
    per_step = BATCH * block
    steps = STEPS if tokens * (1 - val_fraction) * EPOCHS >= STEPS * per_step else \
        max(MIN_STEPS, _round(tokens * (1 - val_fraction) * EPOCHS / per_step, 50))
    out.update(batch_size=BATCH, max_iters=steps, learning_rate=3e-3, min_lr=3e-4, warmup_iters=min(100, steps // 10),
               lr_decay_iters=0, weight_decay=0.1, beta2=0.99, grad_clip=1.0,
               eval_interval=max(50, _round(steps / 8, 50)), eval_iters=20, log_interval=25,
               watch_interval=max(10, _round(steps / 80, 5)), sample_tokens=200,
               sample_prompt=sample_prompt, out_dir=out_dir_for(name))
    return out


def _round(value: float, step: int) -> int:
    return max(step, int(math.floor(value / step + 0.5)) * step)
