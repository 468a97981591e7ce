"""Checkpoints of every kind an export meets, made in a second without training: each architecture, with
and without biases, with the char and the GPT-2 BPE tokenizer of `tests.commands.TEXT`, and attention-only. Their
weights are random and large (std 0.3, norm gains around 1), so logits spread over several units: a conversion
that is off in any part shows, and greedy decoding never hangs on a near tie."""

from __future__ import annotations

from pathlib import Path

import torch

from data.tokenizer import build_tokenizer
from formats.checkpoint import save_checkpoint
from model.config import GPTConfig
from model.gpt import GPT
from tests.commands import TEXT

# name: (arch, tokenizer, bias)
KINDS = {
    "gpt2-char": ("gpt2", "char", False),
    "gpt2-bpe": ("gpt2", "gpt2", True),
    "modern-char": ("modern", "char", False),
    "modern-bpe": ("modern", "gpt2", False),
    "modern-bias": ("modern", "gpt2", True),  # Hugging Face has no exact class for it: refused there
    "gpt2-attn-only": ("gpt2", "char", False),
    "modern-attn-only": ("modern", "char", False),
}
OPTIONS = {"gpt2-attn-only": {"attn_only": True}, "modern-attn-only": {"attn_only": True}}  # beyond KINDS' three
BLOCK_SIZE = 32


def make_checkpoint(folder: Path, kind: str, seed: int = 0, **options) -> Path:
    """folder/ckpt.pt holding a model of `kind` (see KINDS), with the `GPTConfig` settings of `options` too (e.g.
    relative_positions=True); returns the folder."""
    arch, tokenizer_name, bias = KINDS[kind]
    tokenizer = build_tokenizer(tokenizer_name, TEXT)
    torch.manual_seed(seed)
    model = GPT(
        GPTConfig(
            vocab_size=tokenizer.vocab_size,
            block_size=BLOCK_SIZE,
            n_layer=2,
            n_head=4,
            n_embd=32,
            arch=arch,
            bias=bias,
            **{**OPTIONS.get(kind, {}), **options},
        )
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.3)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.add_(1.0)
    save_checkpoint(
        folder / "ckpt.pt",
        {
            "model": model.state_dict(),
            "model_config": model.config.to_dict(),
            "tokenizer": tokenizer.to_meta(),
            "step": 0,
        },
    )
    return folder
