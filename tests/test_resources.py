"""Memory: a config is measured before anything large is allocated, and an allocation that fails anyway
is one line naming the keys to lower."""

import pytest
import torch

from common.errors import UserError
from common.settings import TrainConfig
from model.gpt import GPT
from model.memory import available_memory
from trainer import runtime

MIB = 1 << 20


@pytest.mark.parametrize(
    "arch,options",
    [
        ("gpt2", {}),
        ("modern", {}),
        ("gpt2", {"attn_only": True}),
        ("gpt2", {"relative_positions": True}),
        ("modern", {"attn_only": True}),
        ("gpt2", {"attn_only": True, "relative_positions": True}),
    ],
)
def test_the_estimate_of_the_parameters_is_a_lower_bound(arch, options):
    """Refusing must never be wrong: the estimate is what the model really holds, counted once (`parameter_count`)."""
    cfg = TrainConfig.from_keys(arch=arch, n_layer=3, n_head=2, n_embd=32, block_size=16, **options)
    n_params = sum(p.numel() for p in GPT(cfg.model_config(vocab_size=65)).parameters())
    estimate = runtime.training_bytes(cfg, vocab_size=65)["parameters"]
    assert estimate == 16 * n_params  # weights, gradients and two AdamW moments


def test_a_config_that_cannot_fit_is_refused_naming_what_to_lower(monkeypatch):
    monkeypatch.setattr("model.memory.available_memory", lambda device: 64 * MIB)
    runtime.check_training_fits(TrainConfig(), 65, torch.device("cpu"))  # the default: a few MiB
    with pytest.raises(UserError, match=r"needs at least .* and 64\.0 MiB is free; lower --n_embd \(now 4,096\)"):
        runtime.check_training_fits(TrainConfig.from_keys(n_embd=4096), 65, torch.device("cpu"))
    with pytest.raises(UserError, match=r"lower --batch_size \(now 100,000\), --block_size \(now 64\) or --n_layer"):
        runtime.check_training_fits(TrainConfig(batch_size=100_000), 65, torch.device("cpu"))
    with pytest.raises(UserError, match=r"generating 1,000,000 sentences .* lower --corpus_sentences"):
        runtime.check_corpus_fits(TrainConfig(corpus_sentences=1_000_000))


def test_unknown_free_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr("model.memory.available_memory", lambda device: None)
    runtime.check_training_fits(TrainConfig.from_keys(n_embd=1 << 20, n_head=1), 65, torch.device("cpu"))
    runtime.check_corpus_fits(TrainConfig(corpus_sentences=10**15))


def test_free_memory_is_read_on_this_machine():
    free = available_memory(torch.device("cpu"))
    assert free is None or free > 0


def test_an_allocation_that_fails_anyway_is_one_line_and_other_errors_pass_through():
    cfg = TrainConfig(batch_size=64)
    with pytest.raises(UserError, match=r"^ran out of memory \(.*not enough memory.*\); lower --batch_size"):
        with runtime.out_of_memory(cfg):
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                "you tried to allocate 1099511627776 bytes."
            )
    with pytest.raises(UserError, match="ran out of memory"):
        with runtime.out_of_memory(cfg):
            raise MemoryError
    with pytest.raises(RuntimeError, match="a bug"):  # not a memory problem: keeps its traceback
        with runtime.out_of_memory(cfg):
            raise RuntimeError("a bug")
