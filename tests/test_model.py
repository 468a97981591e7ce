"""GPT: shapes, parameter count, causality, KV-cached generation, sampling filters."""

import pytest
import torch

from model import GPT, GPTConfig, KVCache, sample_next
from model.decode import TokenDecoder


def tiny(arch="gpt2", **kw):
    cfg = dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16, arch=arch)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_loss_and_logit_shapes(arch):
    model = tiny(arch)
    idx = torch.randint(0, 50, (3, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 16, 50) and loss.ndim == 0
    last, none = model(idx)
    assert last.shape == (3, 1, 50) and none is None
    torch.testing.assert_close(last[:, 0], logits[:, -1])


def test_output_head_is_tied_and_counted_once():
    model = tiny()
    assert model.lm_head.weight is model.wte.weight
    total = sum(p.numel() for p in model.parameters())
    assert model.num_params(non_embedding=False) == total
    assert model.num_params() == total - 16 * 16  # minus position embeddings


def test_recipe_model_size_matches_nanogpt():
    # nanoGPT reports 0.80M parameters for the shakespeare_char CPU recipe.
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128))
    assert round(model.num_params() / 1e6, 2) == 0.80


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_model_is_causal(arch):
    model = tiny(arch)
    a = torch.randint(0, 50, (1, 12))
    b = a.clone()
    b[0, 8:] = (b[0, 8:] + 1) % 50
    la, _ = model(a, all_logits=True)
    lb, _ = model(b, all_logits=True)
    torch.testing.assert_close(la[0, :8], lb[0, :8])


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_readable_path_gives_the_same_logits(arch):
    model = tiny(arch)
    if arch == "modern":  # zero-initialised projections would make every path trivially equal
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.2)
    idx = torch.randint(0, 50, (2, 16))
    fast, _ = model(idx, all_logits=True)
    readable, patterns = model.forward_with_attention(idx)
    torch.testing.assert_close(fast, readable, atol=1e-5, rtol=1e-5)
    assert [p.shape for p in patterns] == [(2, 2, 16, 16)] * 2


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
@pytest.mark.parametrize("new_tokens", [1, 10, 40])  # 40 > block_size: the context re-anchors
def test_greedy_generation_is_identical_with_and_without_kv_cache(arch, new_tokens):
    model = tiny(arch)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)  # a random but decisive model
    prompt = torch.randint(0, 50, (2, 5))
    cached = model.generate(prompt, new_tokens, temperature=0, use_cache=True)
    uncached = model.generate(prompt, new_tokens, temperature=0, use_cache=False)
    assert cached.shape == (2, 5 + new_tokens)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("arch,bias", [("gpt2", False), ("gpt2", True), ("modern", False)])
def test_token_decoder_matches_the_module_path(arch, bias):
    # Sampling decodes one token at a time on plain tensors (model/decode.py);
    # every step must give the logits the modules give, and fill the cache the same way.
    model = tiny(arch, bias=bias)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    cfg = model.config
    tokens = torch.randint(0, 50, (2, 12))

    def new_cache():
        return KVCache(cfg.n_layer, 2, cfg.n_head, cfg.block_size, cfg.n_embd // cfg.n_head,
                       torch.device("cpu"), torch.float32)

    module_cache, lean_cache = new_cache(), new_cache()
    decoder = TokenDecoder(model, lean_cache)
    with torch.inference_mode():
        model._step(tokens[:, :4], module_cache)  # a prompt, through the modules, in both caches
        model._step(tokens[:, :4], lean_cache)
        for t in range(4, 12):
            expected = model._step(tokens[:, t:t + 1], module_cache)
            got = decoder.step(tokens[:, t:t + 1])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert lean_cache.length == module_cache.length == 12
    for layer in range(cfg.n_layer):
        torch.testing.assert_close(lean_cache.keys[layer], module_cache.keys[layer], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lean_cache.values[layer], module_cache.values[layer], atol=1e-5, rtol=1e-5)


def test_token_decoder_refuses_a_full_cache():
    model = tiny()
    cfg = model.config
    cache = KVCache(cfg.n_layer, 1, cfg.n_head, cfg.block_size, cfg.n_embd // cfg.n_head,
                    torch.device("cpu"), torch.float32)
    cache.length = cfg.block_size
    with pytest.raises(ValueError, match="cache is full"):
        TokenDecoder(model, cache).step(torch.zeros(1, 1, dtype=torch.long))


def test_long_prompt_is_cropped_to_block_size():
    model = tiny()
    out = model.generate(torch.randint(0, 50, (1, 40)), 3, temperature=0)
    assert out.shape == (1, 43)


def test_seeded_sampling_is_reproducible():
    model = tiny()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    a = model.generate(prompt, 20, generator=torch.Generator().manual_seed(7))
    b = model.generate(prompt, 20, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_top_k_and_top_p_keep_only_the_likely_tokens():
    logits = torch.tensor([[4.0, 3.0, 1.0, 0.0, -1.0]])
    g = torch.Generator().manual_seed(0)
    picks = {int(sample_next(logits, 1.0, top_k=2, generator=g)) for _ in range(200)}
    assert picks == {0, 1}
    # softmax: [0.70, 0.26, 0.035, ...]; top_p=0.5 keeps only the first.
    picks = {int(sample_next(logits, 1.0, top_p=0.5, generator=g)) for _ in range(100)}
    assert picks == {0}
    assert int(sample_next(logits, 0.0)) == 0


def test_ablating_a_head_changes_the_output_and_bad_heads_are_named():
    model = tiny()
    idx = torch.randint(0, 50, (1, 8))
    plain, _ = model(idx, all_logits=True)
    ablated, _ = model(idx, all_logits=True, ablate={1: [0]})
    assert not torch.allclose(plain, ablated)
    with pytest.raises(ValueError, match="2 layers of 2 heads"):
        model(idx, ablate={2: [0]})


def test_config_rejects_impossible_sizes():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(vocab_size=10, n_embd=10, n_head=4)
    with pytest.raises(ValueError, match="n_layer"):
        GPTConfig(vocab_size=10, n_layer=0)
