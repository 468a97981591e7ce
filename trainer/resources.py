"""Memory: what a run needs, estimated before anything large is allocated, against what is free (`memory`).

The estimates are deliberately low (a lower bound of what training certainly needs), so a config
is refused only when it cannot fit; a config that passes and still runs out of memory is caught
where it allocates (`out_of_memory`), and both name the config key to lower.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from cli import UserError, is_out_of_memory
from config import TrainConfig
from data.corpora import GENERATED
from model.memory import parameter_count, shortfall
from model.memory import size_text as _size

# Preparing text holds it several times over: the text, the ids as Python ints, then as numpy
# arrays. Measured on the pronoun corpus: about 1.3 kB per generated sentence, 18 bytes per
# character of a char-tokenized text; these are rounded down.
BYTES_PER_SENTENCE = 1000
BYTES_PER_TEXT_BYTE = 10


def check_corpus_fits(cfg: TrainConfig) -> None:
    """Refuses a corpus whose preparation cannot fit in memory, before it starts."""
    if cfg.dataset in GENERATED:
        need = cfg.corpus_sentences * BYTES_PER_SENTENCE
        what, fix = f"generating {cfg.corpus_sentences:,} sentences", "lower --corpus_sentences"
    elif Path(cfg.dataset).is_file():
        size = Path(cfg.dataset).stat().st_size
        need = size * BYTES_PER_TEXT_BYTE
        what, fix = f"preparing {cfg.dataset} ({_size(size)})", "use a smaller text"
    else:
        return
    free = shortfall(need, torch.device("cpu"))
    if free is not None:
        raise UserError(f"{what} needs at least {_size(need)} of memory, and {_size(free)} is free; {fix}")


def training_bytes(cfg: TrainConfig, vocab_size: int) -> dict[str, int]:
    """A lower bound on training's memory: {"parameters": weights, gradients and optimizer state,
    "activations": one micro-batch's saved activations and logits}."""
    m = cfg.model
    tokens = cfg.batch_size * m.block_size
    # Per layer and token at least: the first norm, q/k/v, attention output and projection (6 d) and, unless
    # attention-only, the second norm and the MLP's in and out (11 d more).
    per_token = m.n_layer * (6 if m.attn_only else 17) * m.n_embd + 3 * vocab_size
    return {"parameters": 16 * parameter_count(cfg.model_config(vocab_size)), "activations": 4 * tokens * per_token}


def check_training_fits(cfg: TrainConfig, vocab_size: int, device: torch.device, *, held: int = 0) -> None:
    """Refuses, naming the keys to lower, a config whose training cannot fit in `device`'s memory; `held`: bytes of
    it allocated there already (the weights of a model read to fine-tune)."""
    need = training_bytes(cfg, vocab_size)
    total = sum(need.values()) - held
    free = shortfall(total, device)
    if free is not None:
        loaded = f", of which the weights read, {_size(held)}, are loaded already" if held else ""
        raise UserError(f"this config needs at least {_size(total + held)} of memory to train on {device.type} "
                        f"(parameters and optimizer {_size(need['parameters'])}, activations "
                        f"{_size(need['activations'])}{loaded}), and {_size(free)} {'more ' if held else ''}is free; "
                        f"{_keys_to_lower(cfg, need)}")


def _keys_to_lower(cfg: TrainConfig, need: dict[str, int]) -> str:
    if cfg.fine_tunes:  # the model's sizes are the model's own
        if need["parameters"] >= need["activations"]:
            return f"fine-tune a smaller model than {cfg.init_from}, or use a machine with more memory"
        return f"lower --batch_size (now {cfg.batch_size:,}) or --block_size (now {cfg.model.block_size:,})"
    if need["parameters"] >= need["activations"]:
        return f"lower --n_embd (now {cfg.model.n_embd:,}) or --n_layer (now {cfg.model.n_layer:,})"
    return (f"lower --batch_size (now {cfg.batch_size:,}), --block_size (now {cfg.model.block_size:,}) or --n_layer "
            f"(now {cfg.model.n_layer:,})")


@contextmanager
def out_of_memory(cfg: TrainConfig) -> Iterator[None]:
    """An allocation that fails inside becomes one line naming the keys to lower."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        need = training_bytes(cfg, 1)
        raise UserError(f"ran out of memory ({' '.join(str(exc).split())[:120] or type(exc).__name__}); "
                        f"{_keys_to_lower(cfg, need)}") from None
