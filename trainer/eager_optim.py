"""Optimizers that skip torch.compile's hooks, for runs that compile nothing.

torch.optim wraps `zero_grad`, `state_dict`, `load_state_dict`, `add_param_group` and AdamW's `step` so
that torch.compile treats them specially; the first call of each wrapper imports torch._dynamo, about
a second of start-up that a run without --compile never uses. These classes call the methods the
wrappers wrap, so the arithmetic, results and checkpoints are exactly torch's. A torch whose methods
are not wrapped this way simply runs its own methods.
"""

from __future__ import annotations

import inspect

import torch


def _unwrapped(method):
    # All the way down: once torch.optim.AdamW itself has been instantiated, torch has wrapped its
    # step once more (for step hooks and the profiler).
    return inspect.unwrap(method)


class EagerOptimizer:
    """Mix in before a torch.optim.Optimizer subclass."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        _unwrapped(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self) -> dict:
        return _unwrapped(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _unwrapped(torch.optim.Optimizer.load_state_dict)(self, state_dict)

    def add_param_group(self, param_group: dict) -> None:
        _unwrapped(torch.optim.Optimizer.add_param_group)(self, param_group)


class AdamW(EagerOptimizer, torch.optim.AdamW):
    """torch's AdamW. Its step's wrapper also sets the grad mode (off, as AdamW is not differentiable
    here), so the unwrapped step runs under no_grad."""

    def step(self, closure=None):
        update = _unwrapped(torch.optim.AdamW.step)
        with torch.no_grad():
            return update(self, closure)
