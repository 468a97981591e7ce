"""The optimizers and the learning-rate schedule.

The optimizers skip torch.compile's hooks: torch.optim wraps `zero_grad`, `state_dict`, `load_state_dict`,
`add_param_group` and AdamW's `step` so that torch.compile treats them specially, and the first call of each
wrapper imports torch._dynamo, about a second of start-up that a run without --compile never uses. Calling the
methods the wrappers wrap keeps the arithmetic, results and checkpoints exactly torch's.

Muon (Keller Jordan et al., 2024), for hidden matrices only, replaces the momentum-averaged gradient G by the
nearest semi-orthogonal matrix (U Vᵀ from G = U S Vᵀ), approximated by a few Newton–Schulz iterations, so every
direction of the update moves the same amount: small transformers train markedly faster per step than with AdamW.
Same-shaped matrices are stacked so each iteration is one batched matmul, in bfloat16 where the hardware
multiplies it natively (elsewhere emulated bfloat16 is slower than float32): the iteration only needs the
direction of the update, which bfloat16 keeps.
"""

from __future__ import annotations

import inspect
import math
from collections import defaultdict

import torch
import torch.nn as nn

from common.settings import TrainConfig
from model.gpt import is_matrix


class EagerOptimizer:
    """Mix in before a torch.optim.Optimizer subclass: its methods without torch.compile's wrappers."""

    zero_grad = inspect.unwrap(torch.optim.Optimizer.zero_grad)
    state_dict = inspect.unwrap(torch.optim.Optimizer.state_dict)
    load_state_dict = inspect.unwrap(torch.optim.Optimizer.load_state_dict)
    add_param_group = inspect.unwrap(torch.optim.Optimizer.add_param_group)

    def load_state(self, saved: dict) -> None:
        """Puts back the state (moments, momentum) of `saved`, a `state_dict()` read from a checkpoint; the settings
        (betas, weight decay) stay this optimizer's. A ValueError (or the KeyError, TypeError... of a damaged
        `saved`) when that state does not fit these parameters."""
        fresh = self.state_dict()
        n_params = sum(len(group["params"]) for group in fresh["param_groups"])
        if not isinstance(saved["state"], dict) or any(
            type(k) is not int or not 0 <= k < n_params for k in saved["state"]
        ):
            raise ValueError("its optimizer state names parameters this model does not have")
        self.load_state_dict({"state": saved["state"], "param_groups": fresh["param_groups"]})
        for param, values in self.state.items():
            for name, value in values.items():
                if not isinstance(value, torch.Tensor) or (value.dim() > 0 and value.shape != param.shape):
                    raise ValueError(
                        f"optimizer state {name!r} does not match a parameter of shape {tuple(param.shape)}"
                    )


class AdamW(EagerOptimizer, torch.optim.AdamW):
    """torch's AdamW. Its step's wrapper also turns gradients off, so the unwrapped step runs under no_grad; unwrapped
    when it is called, all the way down: once torch.optim.AdamW has been instantiated, torch has wrapped its step once
    more (step hooks)."""

    def step(self, closure=None):
        with torch.no_grad():
            return inspect.unwrap(torch.optim.AdamW.step)(self, closure)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to learning_rate, then cosine decay to min_lr, then flat."""
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= cfg.decay_iters:
        return cfg.min_lr
    progress = (step - cfg.warmup_iters) / max(1, cfg.decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.learning_rate - cfg.min_lr)


def schedule_problem(cfg: TrainConfig, start_step: int) -> str | None:
    """What in the learning-rate schedule cannot be what the user meant, for a run starting at `start_step`;
    None when nothing. (min_lr above learning_rate is refused by the config itself.)"""
    if start_step < cfg.warmup_iters and cfg.warmup_iters >= cfg.max_iters:
        return (
            f"the learning rate warms up over --warmup_iters={cfg.warmup_iters} steps but the run ends at step "
            f"{cfg.max_iters}, so it never reaches --learning_rate={cfg.learning_rate:g}; lower --warmup_iters "
            f"(a few percent of the run is usual) or raise --max_iters"
        )
    if cfg.lr_decay_iters and cfg.warmup_iters > cfg.lr_decay_iters:
        return (
            f"--warmup_iters={cfg.warmup_iters} ends after --lr_decay_iters={cfg.lr_decay_iters}, so the learning "
            f"rate jumps from its warm-up straight down to --min_lr={cfg.min_lr:g}; set --lr_decay_iters beyond "
            f"the warm-up"
        )
    return None


def divergence_fix(cfg: TrainConfig) -> str:
    """What to change when a run diverges, naming the setting that most likely caused it. AdamW's decoupled
    weight decay multiplies each matrix by (1 - lr x weight_decay) every step: at lr x weight_decay >= 1 it
    removes the whole weight and more, flipping its sign and growing it, whatever the gradients do. That is
    the weight decay's doing when it is beyond its usual range (0 to 1); a huge learning rate does it too."""
    shrink = cfg.learning_rate * cfg.weight_decay
    if shrink >= 1 and cfg.weight_decay > 1:
        return (
            f"a lower --weight_decay (now {cfg.weight_decay:g}): times --learning_rate={cfg.learning_rate:g} it is "
            f"{shrink:g}, so each step takes away more than the whole of every weight matrix; keep it well below "
            f"1 / learning_rate = {1 / cfg.learning_rate:g} (0.1 is usual)"
        )
    clip = "" if cfg.grad_clip > 0 else " or --grad_clip=1"
    muon = f" or --muon_lr (now {cfg.muon_lr:g})" if cfg.optimizer == "muon" else ""
    return f"a lower --learning_rate (now {cfg.learning_rate:g}){muon}{clip}"


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device):
    """AdamW with weight decay on matrices (`model.gpt.is_matrix`) only: decaying norms' gains and biases (and
    relative position biases) pulls them towards zero for no benefit. With optimizer = "muon", the blocks' hidden
    matrices go to Muon instead, which decays none of them."""
    hidden = [
        p
        for name, p in model.named_parameters()
        if cfg.optimizer == "muon" and name.startswith("blocks.") and p.dim() == 2 and is_matrix(name, p)
    ]
    hidden_ids = {id(p) for p in hidden}
    rest = [(name, p) for name, p in model.named_parameters() if p.requires_grad and id(p) not in hidden_ids]
    decay = [p for name, p in rest if is_matrix(name, p)]
    no_decay = [p for name, p in rest if not is_matrix(name, p)]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = {"fused": True} if device.type in ("cpu", "cuda") else {}  # fused on CPU since torch 2.4
    adamw = AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **kwargs)
    if not hidden:
        return adamw
    # The schedule sets every group's lr as learning_rate x lr_scale, so Muon's
    # own rate follows the same warm-up and decay.
    muon = Muon(
        [{"params": hidden, "lr_scale": cfg.muon_lr / cfg.learning_rate}],
        lr=cfg.muon_lr,
        ns_steps=cfg.muon_ns_steps,
        dtype=iteration_dtype(cfg.muon_dtype, device),
    )
    return Optimizers(adamw, muon)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


# Quintic iteration coefficients chosen to push singular values towards 1 fast.
NS_COEFFS = (3.4445, -4.7750, 2.0315)
MOMENTUM = 0.95


def iteration_dtype(choice: str, device: torch.device) -> torch.dtype:
    """The dtype of the Newton-Schulz iteration for a `muon_dtype` choice (auto, bfloat16, float32): auto is
    bfloat16 where `device` multiplies bfloat16 matrices in hardware (faster than float32 there)."""
    if choice != "auto":
        return getattr(torch, choice)
    native = device.type == "cuda"
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        native = any(check is not None and check() for check in checks)
    return torch.bfloat16 if native else torch.float32


def orthogonalise(G: torch.Tensor, steps: int = 5, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Approximately U Vᵀ for each matrix in a batch G [k, m, n], computed in `dtype`."""
    X = G.to(dtype)
    transposed = X.shape[-2] > X.shape[-1]
    if transposed:  # iterate on the wide orientation: X Xᵀ is then the smaller Gram matrix
        X = X.transpose(-2, -1)
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)  # spectral norm <= Frobenius norm <= 1
    a, b, c = NS_COEFFS
    for _ in range(steps):
        A = X @ X.transpose(-2, -1)
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    return X.transpose(-2, -1) if transposed else X


class Muon(EagerOptimizer, torch.optim.Optimizer):
    """Nesterov momentum, then each update orthogonalised. No weight decay: `--weight_decay` is AdamW's."""

    def __init__(self, params, lr: float = 0.02, ns_steps: int = 5, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(params, dict(lr=lr, ns_steps=ns_steps))
        self.dtype = dtype

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            by_shape: dict[tuple, list[torch.Tensor]] = defaultdict(list)
            for p in group["params"]:
                if p.grad is not None:
                    by_shape[tuple(p.shape)].append(p)
            for shape, params in by_shape.items():
                grads = []
                for p in params:
                    if "momentum_buffer" not in self.state[p]:
                        self.state[p]["momentum_buffer"] = torch.zeros_like(p)
                    buf = self.state[p]["momentum_buffer"]
                    buf.mul_(MOMENTUM).add_(p.grad)
                    grads.append(p.grad.add(buf, alpha=MOMENTUM))  # Nesterov: looks ahead along the momentum
                update = orthogonalise(torch.stack(grads), group["ns_steps"], self.dtype)
                # Scale so the update's RMS does not shrink for tall matrices.
                scale = max(1.0, shape[0] / shape[1]) ** 0.5
                for p, u in zip(params, update, strict=True):
                    p.add_(u.to(p.dtype), alpha=-group["lr"] * scale)
        return loss


class Optimizers:
    """Several optimizers stepped as one: what the training loop needs of an optimizer."""

    def __init__(self, *optimizers: torch.optim.Optimizer) -> None:
        self.optimizers = optimizers  # saved under "0", "1", ...

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {str(i): opt.state_dict() for i, opt in enumerate(self.optimizers)}

    def load_state(self, saved: dict) -> None:
        for i, opt in enumerate(self.optimizers):
            opt.load_state(saved[str(i)])
