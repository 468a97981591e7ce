"""Where a run's model starts (`init_from`): a new model of the config's sizes ("scratch"), the checkpoint a
--resume run continues ("resume" says the same), or a model trained elsewhere that the run fine-tunes: a Hugging
Face GPT-2-family name or folder, a nanoGPT checkpoint, or a gptwatch checkpoint whose weights start a new run
(`checkpoints.load_model` reads each).

A model to fine-tune decides the run's model: its sizes and architecture (`MODEL_KEYS`), its settings from
elsewhere (query/key/value biases, GPT-2's GELU, padding rows) and its tokenizer, which the data is prepared
with. A model key or tokenizer the user set (in a config file they named, or on the command line) must agree with
it, or the run is refused naming both; a smaller block_size crops its positions, a larger one is refused; dropout
is the run's own. A resumed fine-tune takes all of this from its checkpoint, never reading the model again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from cli import UsageError
from config import RESUME, SCRATCH, TrainConfig
from data.prepare import ModelVocabulary
from data.tokenizer import FULL_GPT2, Tokenizer, tokenizer_from_meta
from formats import load_model
from formats.foreign import describe, identify
from formats.hub import hub_name
from formats.layout import built
from model.config import MODEL_KEYS, GPTConfig
from model.gpt import GPT
from trainer.checkpoint import read_resumed

CHECKPOINT = "ckpt.pt"
SAME_KIND = {"char": ("char",), "gpt2": ("gpt2", FULL_GPT2)}   # a tokenizer key -> the vocabularies it agrees with


@dataclass
class Start:
    """What a run starts from. `cfg` is the run's settings, a fine-tune's model keys its model's and `init_from` the
    model it fine-tunes (for a resumed run: the one its checkpoint records). `vocabulary`: the tokenizer the data is
    prepared with (None: built from the text, as `cfg.tokenizer` says). `model`: the model to fine-tune, read
    (a new fine-tune only). `checkpoint`: the one a resumed run continues. `description`: what is fine-tuned, in
    one line (a new fine-tune only)."""

    cfg: TrainConfig
    vocabulary: ModelVocabulary | None = None
    model: GPT | None = None
    checkpoint: dict | None = None
    description: str | None = None

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The model the run trains, for data of `vocab_size` tokens (a model from elsewhere has its own)."""
        if self.model is not None:
            return self.model.config
        saved = self.checkpoint["model_config"] if self.checkpoint is not None else None
        if saved is not None and self.cfg.fine_tunes:
            return GPTConfig(**{**saved, "dropout": self.cfg.model.dropout})
        config = self.cfg.model_config(vocab_size)
        if saved is not None:  # a smaller --block_size trains on shorter windows of the same position table
            config.block_size = saved["block_size"]
        return config


def starting_point(cfg: TrainConfig, path: Path, device: torch.device) -> Start:
    """Where the run with settings `cfg` and checkpoint `path` starts (see the module's docstring)."""
    if cfg.resume:
        return _resuming(cfg, path)
    if cfg.fine_tunes:
        return _importing(cfg, device)
    return Start(cfg)


def _importing(cfg: TrainConfig, device: torch.device) -> Start:
    """A new fine-tune: the model read, checked against the keys the user set, and the run's settings made its."""
    block_size = cfg.model.block_size if "block_size" in cfg.given else None
    loaded = load_model(identify(cfg.init_from), device, block_size=block_size)
    config = loaded.model.config
    what = f"the model {cfg.init_from}"
    for key in MODEL_KEYS:
        given, theirs = getattr(cfg.model, key), getattr(config, key)
        if key in cfg.given and given != theirs:
            raise UsageError(f"config key '{key}' is {given!r} but {what} has {theirs!r}; "
                             f"leave {key} out to take the model's, or fine-tune another model")
    _check_tokenizer(cfg, loaded.tokenizer, what)
    cfg = cfg.replaced(**{key: getattr(config, key) for key in (*MODEL_KEYS, "block_size")})
    model = loaded.model
    if config.dropout != cfg.model.dropout:  # each dropout module takes its probability when it is built
        model = built(dataclasses.replace(config, dropout=cfg.model.dropout), model.state_dict(), device)
    source = describe(loaded) if "imported" in loaded.checkpoint else \
        f"gptwatch checkpoint {cfg.init_from} (step {loaded.checkpoint['step']})"
    return Start(cfg, ModelVocabulary(loaded.tokenizer, cfg.init_from), model, description=source)


def _resuming(cfg: TrainConfig, path: Path) -> Start:
    """A resumed run: its checkpoint wins. `init_from`, when given, must name what the checkpoint started from; a
    fine-tune's model keys not given, and its tokenizer, are the checkpoint's."""
    checkpoint = read_resumed(path)
    started = checkpoint["train_config"].get("init_from", SCRATCH)
    started = started if isinstance(started, str) and started not in ("", RESUME) else SCRATCH
    if "init_from" in cfg.given and cfg.init_from != RESUME and not same_source(cfg.init_from, started):
        raise UsageError(f"config key 'init_from' is {cfg.init_from!r} but the checkpoint {path} started from "
                         f"{started!r}; resume with --init_from={started} (or without init_from), or start a new "
                         f"--out_dir")
    cfg = cfg.replaced(init_from=started)
    if not cfg.fine_tunes:
        return Start(cfg, checkpoint=checkpoint)
    saved = GPTConfig(**checkpoint["model_config"])   # a switch it does not record is off
    cfg = cfg.replaced(**{key: getattr(saved, key) for key in (*MODEL_KEYS, "block_size") if key not in cfg.given})
    tokenizer = tokenizer_from_meta(checkpoint["tokenizer"])
    _check_tokenizer(cfg, tokenizer, f"the checkpoint {path}")
    return Start(cfg, ModelVocabulary(tokenizer, started), checkpoint=checkpoint)


def _check_tokenizer(cfg: TrainConfig, tokenizer: Tokenizer, what: str) -> None:
    """A tokenizer the user set must be of the model's kind: char for a char vocabulary, gpt2 for GPT-2's BPE (the
    model's vocabulary is kept as it is, never compacted to the text)."""
    if "tokenizer" in cfg.given and tokenizer.name not in SAME_KIND[cfg.tokenizer]:
        raise UsageError(f"config key 'tokenizer' is {cfg.tokenizer!r} but {what} reads text with its own "
                         f"{tokenizer.name} vocabulary of {tokenizer.vocab_size:,} tokens; leave tokenizer out to "
                         f"take the model's, or fine-tune another model")


def same_source(a: str, b: str) -> bool:
    """Whether two init_from values name the same model: the same words, the same hub model (`gpt2` is
    `openai-community/gpt2`), or paths to the same folder or checkpoint (a folder holding ckpt.pt is that file)."""
    if a == b:
        return True
    if hub_name(a) is not None and not Path(a).exists():
        return hub_name(a) == hub_name(b) and not Path(b).exists()
    return Path(a).exists() and Path(b).exists() and _model_file(a) == _model_file(b)


def _model_file(source: str) -> Path:
    path = Path(source).resolve()
    return path / CHECKPOINT if (path / CHECKPOINT).is_file() else path
