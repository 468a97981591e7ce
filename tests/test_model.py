"""GPT: shapes, parameter count, causality, the options; on every option, the readable path against the fast one
and the cached sampling step against the plain forward (token for token, and the logits); sampling filters."""

import pytest
import torch
from conftest import tiny_model

import model.sampling as sampling
from model import GPT, GPTConfig, KVCache, sample_next
from model.hooks import site_name
from model.memory import parameter_count
from model.sampling import decode, head_output_edits
from watch.measure.heads import Ablation


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_loss_and_logit_shapes(arch):
    model = tiny_model(arch)
    idx = torch.randint(0, 50, (3, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 16, 50) and loss.ndim == 0
    last, none = model(idx)
    assert last.shape == (3, 1, 50) and none is None
    torch.testing.assert_close(last[:, 0], logits[:, -1])


def test_output_head_is_tied_and_counted_once():
    model = tiny_model()
    assert model.lm_head.weight is model.wte.weight
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(t.numel() for t in model.state_dict().values()) - model.wte.weight.numel()  # not twice
    assert parameter_count(model.config, positions=False) == total - 16 * 16  # minus position embeddings


def test_recipe_model_size_matches_nanogpt():
    # nanoGPT reports 0.80M parameters for the shakespeare_char CPU recipe.
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128))
    assert round(parameter_count(model.config, positions=False) / 1e6, 2) == 0.80


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_model_is_causal(arch):
    model = tiny_model(arch)
    a = torch.randint(0, 50, (1, 12))
    b = a.clone()
    b[0, 8:] = (b[0, 8:] + 1) % 50
    la, _ = model(a, all_logits=True)
    lb, _ = model(b, all_logits=True)
    torch.testing.assert_close(la[0, :8], lb[0, :8])


def test_ablating_a_head_changes_the_output_and_bad_heads_are_named():
    model = tiny_model()
    idx = torch.randint(0, 50, (1, 8))
    plain, _ = model(idx, all_logits=True)
    ablated, _ = model.run_with_cache(idx, edits=Ablation([(1, 0)]).edits())
    assert not torch.allclose(plain, ablated)
    with pytest.raises(ValueError, match="no site blocks.2.attn.hook_z in this model"):
        model.run_with_cache(idx, edits=Ablation([(2, 0)]).edits())
    with pytest.raises(ValueError, match="cannot remove head 2: the layer has heads 0 to 1"):
        model.run_with_cache(idx, edits=Ablation([(1, 2)]).edits())
    with pytest.raises(ValueError, match="no site 1 in this model"):
        model.run_with_cache(idx, edits={1: [0]})


def test_config_rejects_impossible_sizes():
    with pytest.raises(ValueError, match="multiple of 'n_head'"):
        GPTConfig(vocab_size=10, n_embd=10, n_head=4)
    with pytest.raises(ValueError, match="n_layer"):
        GPTConfig(vocab_size=10, n_layer=0)


# --- the options: attention alone, relative positions -----------------------------------------------------


def test_attention_only_blocks_have_no_mlp_and_relative_positions_no_position_table():
    model = tiny_model(attn_only=True, relative_positions=True)
    names = set(model.state_dict())
    assert not any(".mlp." in name or ".ln_2." in name for name in names) and "wpe.weight" not in names
    assert model.wpe is None and all(block.mlp is None and block.ln_2 is None for block in model.blocks)
    biases = [block.attn.position_bias for block in model.blocks]
    assert all(b.shape == (2, 16) and not b.any() for b in biases)  # [head, distance], starting at zero
    total = sum(p.numel() for p in model.parameters())
    assert parameter_count(model.config, positions=False) == total - 2 * 2 * 16  # without the positions, as GPT-2
    assert parameter_count(tiny_model(attn_only=True).config, positions=False) == total - 2 * 2 * 16  # the same


def test_relative_positions_are_an_option_of_gpt2_only():
    with pytest.raises(ValueError, match=r"'relative_positions' is an option of arch gpt2: modern .*\(rotary\)"):
        GPTConfig(vocab_size=10, arch="modern", relative_positions=True)


def test_cropping_the_block_crops_the_relative_biases_and_keeps_the_function():
    model = decisive({"relative_positions": True})
    tokens = torch.randint(0, 50, (1, 8))
    before, _ = model(tokens, all_logits=True)
    model.crop_block_size(8)
    assert [tuple(block.attn.position_bias.shape) for block in model.blocks] == [(2, 8)] * 2
    torch.testing.assert_close(model(tokens, all_logits=True)[0], before)


def test_the_options_are_recorded_only_when_set():
    from model.config import CONFIG_KEYS

    assert {"attn_only", "relative_positions"} <= set(CONFIG_KEYS)  # keys of a training config
    assert "attn_only" not in GPTConfig(vocab_size=10).to_dict()  # a checkpoint without them: as before
    config = GPTConfig(vocab_size=10, attn_only=True, relative_positions=True)
    assert config.to_dict()["attn_only"] is config.to_dict()["relative_positions"] is True
    assert GPTConfig(**config.to_dict()) == config


# --- every option: the readable path and the cached sampling step give the plain forward's logits --------

MODELS = {
    "gpt2": {},
    "modern": {"arch": "modern"},  # rotary, QK-norm, RMSNorm, ReLU²
    "bias": {"bias": True},
    "gpt2 weights": {"bias": True, "qkv_bias": True, "activation": "gelu_tanh"},  # as GPT-2's own checkpoints
    "attn_only": {"attn_only": True},
    "relative": {"relative_positions": True},
    "attn_only+relative": {"attn_only": True, "relative_positions": True},
    "modern+attn_only": {"arch": "modern", "attn_only": True},
}
ABLATIONS = ("none", "zero", "mean")


def decisive(options: dict) -> "GPT":  # noqa: F821
    """A tiny model with `options`, its weights (relative biases included) random and large: zero-initialised
    projections ("modern") or tiny weights would make every path trivially equal, and greedy picks fragile."""
    model = tiny_model(**options)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return model


def edits(kind: str) -> dict | None:
    """Heads L0H1 and L1H0 removed the `kind` way (zeros, or a mean output of each head), as edits of the heads'
    outputs (model/hooks.py), or None."""
    if kind == "none":
        return None
    means = {layer: torch.randn(2, 8, generator=torch.Generator().manual_seed(layer)) for layer in (0, 1)}
    return Ablation([(0, 1), (1, 0)], means if kind == "mean" else None).edits()


@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS)
def test_the_readable_path_gives_the_same_logits(options):
    model = decisive(options)
    idx = torch.randint(0, 50, (2, 16))
    fast, _ = model(idx, all_logits=True)
    readable, patterns = model.forward_with_attention(idx)
    torch.testing.assert_close(fast, readable, atol=1e-5, rtol=1e-5)
    assert [p.shape for p in patterns] == [(2, 2, 16, 16)] * 2


CHUNKS = {  # how the 16 tokens of a full block reach the cache, a decode call each
    "T=1 prompt": (1,) * 16,
    "prompt of 4": (4,) + (1,) * 12,
    "T=block_size prompt": (16,),
    "several tokens after the cache": (4, 5, 7),
}


@pytest.mark.parametrize("chunks", CHUNKS.values(), ids=CHUNKS)
@pytest.mark.parametrize("kind", ABLATIONS)
@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS)
def test_cached_decoding_matches_the_full_forward_pass(options, kind, chunks):
    # Sampling runs a prompt, then one token at a time, through the cached step (model/sampling.py's decode);
    # after every call it must give the logits the full forward pass gives there, and leave in the cache
    # exactly the keys and values that pass computes.
    # With heads removed, the reference is the readable path with the same edits of the heads' outputs.
    model = decisive(options)
    tokens = torch.randint(0, 50, (2, 16))
    streams = [site_name("resid_pre", layer) for layer in range(2)]
    full, entering = model.run_with_cache(tokens, streams, edits=edits(kind))
    cache, removed = KVCache(model, batch=2), head_output_edits(model, edits(kind) or {})
    got, start = [], 0
    with torch.inference_mode():
        for n in chunks:
            got.append(decode(model, tokens[:, start : start + n], cache, removed))
            start += n
    ends = torch.tensor(chunks).cumsum(0) - 1
    torch.testing.assert_close(torch.stack(got, dim=1), full[:, ends], atol=1e-5, rtol=1e-5)
    assert cache.length == 16
    for layer, block in enumerate(model.blocks):
        _, keys, values = block.attn._project(block.ln_1(entering[streams[layer]]))
        held = cache.layers[layer].slot[:, : cache.length].transpose(1, 3)  # [B, H, 2, positions, head_dim]
        torch.testing.assert_close(held[:, :, 0], keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(held[:, :, 1], values, atol=1e-5, rtol=1e-5)


def greedy(model: "GPT", prompt: torch.Tensor, new_tokens: int, monkeypatch, **options):  # noqa: F821
    """model.generate's greedy text, and the logits [B, new_tokens, vocab] each token was picked from."""
    seen, pick = [], sampling.sample_next
    monkeypatch.setattr(
        sampling, "sample_next", lambda logits, *args: seen.append(logits.clone()) or pick(logits, *args)
    )
    text = model.generate(prompt, new_tokens, temperature=0, **options)
    return text, torch.stack(seen, dim=1)


# (prompt length, new tokens): a T=1 and a T=block_size prompt; past 16 tokens the context re-anchors
LENGTHS = [(1, 40), (5, 1), (5, 10), (5, 40), (16, 40)]


@pytest.mark.parametrize("prompt_length,new_tokens", LENGTHS)
@pytest.mark.parametrize("kind", ABLATIONS)
@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS)
def test_greedy_text_is_the_same_with_and_without_the_kv_cache(options, kind, prompt_length, new_tokens, monkeypatch):
    model = decisive(options)
    prompt = torch.randint(0, 50, (2, prompt_length))
    cached, cached_logits = greedy(model, prompt, new_tokens, monkeypatch, edits=edits(kind))
    plain, plain_logits = greedy(model, prompt, new_tokens, monkeypatch, edits=edits(kind), use_cache=False)
    assert cached.shape == (2, prompt_length + new_tokens)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(cached_logits, plain_logits, atol=1e-5, rtol=1e-5)


# --- sampling: the cache, the loop, the sampling maths ------------------------------------------------------


def test_cached_decoding_drops_nothing_even_in_training_mode():
    model = tiny_model(dropout=0.5)
    tokens = torch.randint(0, 50, (1, 6))
    logits = {}
    for training in (False, True):
        model.train(training)
        cache = KVCache(model, batch=1)
        with torch.inference_mode():
            logits[training] = [decode(model, tokens[:, :2], cache)] + [
                decode(model, tokens[:, t : t + 1], cache) for t in range(2, 6)
            ]
    assert all(torch.equal(a, b) for a, b in zip(logits[False], logits[True], strict=True))


def test_a_full_cache_is_refused():
    model = tiny_model()
    cache = KVCache(model, batch=1)
    decode(model, torch.zeros(1, model.config.block_size, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="cache is full"):
        decode(model, torch.zeros(1, 1, dtype=torch.long), cache)


def test_long_prompt_is_cropped_to_block_size():
    model = tiny_model()
    out = model.generate(torch.randint(0, 50, (1, 40)), 3, temperature=0)
    assert out.shape == (1, 43)


def test_seeded_sampling_is_reproducible():
    model = tiny_model()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    a = model.generate(prompt, 20, generator=torch.Generator().manual_seed(7))
    b = model.generate(prompt, 20, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
@pytest.mark.parametrize("new_tokens", [10, 40])  # 40 > block_size: the context re-anchors
def test_ablated_generation_changes_the_text_and_is_the_same_with_and_without_kv_cache(arch, new_tokens):
    model = tiny_model(arch)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    prompt = torch.randint(0, 50, (2, 5))
    removed = Ablation([(0, 0), (0, 1), (1, 1)]).edits()
    plain = model.generate(prompt, new_tokens, temperature=0)
    cached = model.generate(prompt, new_tokens, temperature=0, edits=removed)
    uncached = model.generate(prompt, new_tokens, temperature=0, edits=removed, use_cache=False)
    assert torch.equal(cached, uncached)
    assert not torch.equal(cached, plain)
    with pytest.raises(ValueError, match="with the KV cache edits heads' outputs .hook_z. only"):
        model.generate(prompt, 2, edits={"blocks.0.hook_resid_pre": lambda x: x})


def test_sampling_draws_each_token_with_its_probability():
    probs = torch.tensor([0.1, 0.2, 0.7])
    logits = probs.log().expand(30_000, 3)
    draws = sample_next(logits, temperature=1.0, generator=torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws[:, 0], minlength=3) / 30_000
    torch.testing.assert_close(frequencies, probs, atol=0.01, rtol=0)  # about 4 standard errors


def test_top_k_and_top_p_keep_only_the_likely_tokens():
    logits = torch.tensor([[4.0, 3.0, 1.0, 0.0, -1.0]])
    g = torch.Generator().manual_seed(0)
    picks = {int(sample_next(logits, 1.0, top_k=2, generator=g)) for _ in range(200)}
    assert picks == {0, 1}
    # softmax: [0.70, 0.26, 0.035, ...]; top_p=0.5 keeps only the first.
    picks = {int(sample_next(logits, 1.0, top_p=0.5, generator=g)) for _ in range(100)}
    assert picks == {0}
    assert int(sample_next(logits, 0.0)) == 0


@pytest.mark.parametrize("temperature", [1e-46, 1e-300, 5e-324, 1e-21])
def test_a_temperature_too_small_for_float32_samples_greedily(temperature):
    logits = torch.tensor([[4.0, 3.0, 1.0], [0.0, 2.0, 1.0]])
    assert sample_next(logits, temperature, generator=torch.Generator().manual_seed(0)).tolist() == [[0], [1]]


@pytest.mark.parametrize("top_p", [1e-300, 5e-324, 1e-50])
def test_a_top_p_too_small_for_float32_keeps_the_most_likely_token(top_p):
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    picks = {int(sample_next(logits, 1.0, top_p=top_p, generator=torch.Generator().manual_seed(s))) for s in range(20)}
    assert picks == {1}
