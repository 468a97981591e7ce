"""Learning-rate schedule, AdamW parameter groups, Muon."""

import pytest
import torch
from conftest import tiny_model

from common.settings import TrainConfig
from trainer.optim import (
    AdamW,
    Muon,
    Optimizers,
    iteration_dtype,
    lr_at,
    make_optimizer,
    orthogonalise,
    set_lr,
)


def test_schedule_warms_up_then_decays_to_the_floor():
    cfg = TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=100)
    lrs = [lr_at(s, cfg) for s in range(120)]
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11], strict=True))  # rising during warm-up
    assert lrs[10] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:100], lrs[11:101], strict=True))  # then never rising
    assert lrs[100] == lrs[119] == pytest.approx(1e-4)


def test_adamw_decays_matrices_only():
    model = tiny_model(vocab_size=32, block_size=8, n_layer=1, bias=True, seed=None).train()
    opt = make_optimizer(model, TrainConfig(weight_decay=0.1), torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and all(p.dim() == 1 for p in no_decay["params"])
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_relative_position_biases_are_neither_decayed_nor_given_to_muon(optimizer):
    """A relative position table [head, distance] has two dimensions but holds biases, not a matrix."""
    model = tiny_model(vocab_size=32, block_size=8, relative_positions=True, attn_only=True, seed=None).train()
    opt = make_optimizer(model, TrainConfig(optimizer=optimizer, muon_dtype="float32"), torch.device("cpu"))
    names = {id(p): name for name, p in model.named_parameters()}
    groups = [group for o in getattr(opt, "optimizers", [opt]) for group in o.param_groups]
    not_decayed = {names[id(p)] for group in groups if group.get("weight_decay") == 0.0 for p in group["params"]}
    assert {"blocks.0.attn.position_bias", "blocks.1.attn.position_bias"} <= not_decayed
    if optimizer == "muon":
        muon = next(o for o in opt.optimizers if isinstance(o, Muon))
        hidden = {names[id(p)] for group in muon.param_groups for p in group["params"]}
        assert "blocks.0.attn.W_query.weight" in hidden and not any("position_bias" in n for n in hidden)


def test_orthogonalise_flattens_the_singular_values():
    torch.manual_seed(0)
    G = torch.randn(3, 32, 64) * torch.logspace(-2, 1, 64)  # badly conditioned
    s = torch.linalg.svdvals(orthogonalise(G))
    assert s.min() > 0.5 and s.max() < 1.3  # the quintic iteration lands near 1, not exactly on it
    tall = orthogonalise(torch.randn(2, 64, 16))
    assert tall.shape == (2, 64, 16)


def test_orthogonalise_in_bfloat16_points_the_same_way_as_in_float32():
    torch.manual_seed(0)
    G = torch.randn(4, 32, 96)
    full, half = orthogonalise(G), orthogonalise(G, dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16
    cosine = torch.nn.functional.cosine_similarity(full.flatten(1), half.float().flatten(1))
    assert cosine.min() > 0.99


def test_muon_dtype_auto_follows_the_hardware():
    cpu = torch.device("cpu")
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    native = any(check is not None and check() for check in checks)  # bfloat16 matmuls in this CPU's hardware
    assert iteration_dtype("auto", cpu) == (torch.bfloat16 if native else torch.float32)
    assert iteration_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert iteration_dtype("auto", torch.device("mps")) == torch.float32
    assert iteration_dtype("float32", cpu) == torch.float32
    assert iteration_dtype("bfloat16", cpu) == torch.bfloat16
    model = tiny_model(vocab_size=32, block_size=8, seed=None).train()
    opt = make_optimizer(model, TrainConfig(optimizer="muon", muon_dtype="float32"), cpu)
    assert next(o for o in opt.optimizers if isinstance(o, Muon)).dtype == torch.float32


def test_adamw_steps_exactly_as_torch_adamw():
    """Ours only skips the hooks torch.compile needs; the arithmetic is torch's own."""
    torch.manual_seed(0)
    weights = [torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True)]
    twins = [w.detach().clone().requires_grad_() for w in weights]
    ours, theirs = AdamW(weights, lr=1e-2, weight_decay=0.1), torch.optim.AdamW(twins, lr=1e-2, weight_decay=0.1)
    for step in range(3):
        grads = [torch.randn_like(w) for w in weights]
        for w, t, g in zip(weights, twins, grads, strict=True):
            w.grad, t.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        assert all(torch.equal(w, t) for w, t in zip(weights, twins, strict=True)), f"differs at step {step}"
    assert ours.state_dict()["state"][0]["exp_avg"].equal(theirs.state_dict()["state"][0]["exp_avg"])


def test_muon_takes_hidden_matrices_and_follows_the_schedule():
    model = tiny_model(vocab_size=32, block_size=8, seed=None).train()
    cfg = TrainConfig(optimizer="muon", learning_rate=1e-3, muon_lr=0.02)
    opt = make_optimizer(model, cfg, torch.device("cpu"))
    assert isinstance(opt, Optimizers)
    muon = next(o for o in opt.optimizers if isinstance(o, Muon))
    hidden = {id(p) for g in muon.param_groups for p in g["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in hidden}
    assert names and all(n.startswith("blocks.") for n in names) and "wte.weight" not in names
    set_lr(opt, 5e-4)
    assert muon.param_groups[0]["lr"] == pytest.approx(0.01)  # half of muon_lr, as 5e-4 is half of 1e-3


def test_muon_lowers_the_loss_and_its_state_round_trips():
    torch.manual_seed(0)
    model = tiny_model(vocab_size=16, block_size=8, n_layer=1, seed=None).train()
    opt = make_optimizer(model, TrainConfig(optimizer="muon", learning_rate=3e-3), torch.device("cpu"))
    x = torch.randint(0, 16, (4, 8))
    first = None
    for _ in range(30):
        _, loss = model(x, x)
        first = first if first is not None else loss.item()
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert loss.item() < first - 1.0
    state = opt.state_dict()
    again = make_optimizer(model, TrainConfig(optimizer="muon", learning_rate=3e-3), torch.device("cpu"))
    again.load_state(state)
    assert torch.equal(
        again.optimizers[1].state[next(iter(again.optimizers[1].state))]["momentum_buffer"],
        opt.optimizers[1].state[next(iter(opt.optimizers[1].state))]["momentum_buffer"],
    )
