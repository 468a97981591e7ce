"""Optimizer construction and the learning-rate schedule."""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn as nn

from trainer.config import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to learning_rate, then cosine decay to min_lr, then flat."""
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= cfg.decay_iters:
        return cfg.min_lr
    progress = (step - cfg.warmup_iters) / max(1, cfg.decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.learning_rate - cfg.min_lr)


def _fused_supported(device: torch.device) -> bool:
    # fused AdamW runs on CPU too since torch 2.4; older versions only on CUDA.
    if "fused" not in inspect.signature(torch.optim.AdamW).parameters:
        return False
    if device.type == "cuda":
        return True
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return device.type == "cpu" and (major, minor) >= (2, 4)


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device):
    """AdamW with weight decay on matrices (>= 2 dims) only: decaying norms'
    gains and biases pulls them towards zero for no benefit.

    With optimizer = "muon", the blocks' hidden matrices go to Muon instead;
    embeddings (and the tied head), norms and biases stay with AdamW.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    hidden = []
    if cfg.optimizer == "muon":
        hidden = [p for name, p in model.named_parameters() if name.startswith("blocks.") and p.dim() == 2]
    hidden_ids = {id(p) for p in hidden}
    rest = [p for p in params if id(p) not in hidden_ids]
    decay = [p for p in rest if p.dim() >= 2]
    no_decay = [p for p in rest if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = {"fused": True} if _fused_supported(device) else {}
    adamw = torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **kwargs)
    if not hidden:
        return adamw
    from trainer.muon import Muon, Optimizers

    # The schedule sets every group's lr as learning_rate x lr_scale, so Muon's
    # own rate follows the same warm-up and decay.
    muon = Muon([{"params": hidden, "lr_scale": cfg.muon_lr / cfg.learning_rate}], lr=cfg.muon_lr,
                ns_steps=cfg.muon_ns_steps)
    return Optimizers(adamw, muon)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
