"""SelfAttention: the readable path is the reference, the fast path must match it."""

import math

import pytest
import torch

from model import SelfAttention
from model.attention import HeadAblation


def explanation_formula(x: torch.Tensor, attn: SelfAttention) -> torch.Tensor:
    """The reference explanation's single head, computed directly from its weights."""
    queries = x @ attn.W_query.weight.T
    keys = x @ attn.W_key.weight.T
    values = x @ attn.W_value.weight.T
    scores = queries @ keys.T
    T = x.shape[0]
    mask = torch.triu(torch.ones(T, T), diagonal=1).bool()
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=-1)
    return weights @ values


@pytest.mark.parametrize("batch,T,d,heads", [(1, 1, 8, 1), (2, 1, 16, 4), (3, 7, 16, 2), (2, 64, 32, 4),
                                             (1, 33, 24, 3)])
@pytest.mark.parametrize("rotary_qknorm", [False, True])
def test_fast_and_readable_paths_agree(batch, T, d, heads, rotary_qknorm):
    attn = SelfAttention(d, d, n_head=heads, rotary=rotary_qknorm and (d // heads) % 2 == 0,
                         qk_norm=rotary_qknorm).eval()
    x = torch.randn(batch, T, d)
    fast = attn(x)
    readable, weights = attn.forward_with_weights(x)
    assert weights.shape == (batch, heads, T, T)
    torch.testing.assert_close(fast, readable, atol=1e-5, rtol=1e-5)


def test_one_head_without_projection_is_the_explanations_layer():
    # The explanation's example: 6 tokens of 3-dim embeddings projected to 2 dims... and back the other
    # way round in the mission text (2 -> 3); both are the same function.
    torch.manual_seed(123)
    x = torch.rand(6, 2)
    attn = SelfAttention(2, 3, n_head=1, out_proj=False)
    result, weights = attn.forward_with_weights(x)
    assert result.shape == (6, 3) and weights.shape == (1, 6, 6)  # [head, query_pos, key_pos]
    torch.testing.assert_close(result, explanation_formula(x, attn), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(attn(x), result, atol=1e-6, rtol=1e-6)


def test_weights_rows_sum_to_one_and_nothing_above_the_diagonal():
    attn = SelfAttention(16, 16, n_head=4)
    _, weights = attn.forward_with_weights(torch.randn(2, 9, 16))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9))
    upper = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
    assert (weights[..., upper] == 0).all()


@pytest.mark.parametrize("path", ["fast", "readable"])
def test_causal_a_later_token_never_changes_an_earlier_output(path):
    attn = SelfAttention(16, 16, n_head=2).eval()
    x = torch.randn(1, 10, 16)
    y = x.clone()
    y[0, 6:] = torch.randn(4, 16)  # change positions 6..9
    run = attn if path == "fast" else (lambda t: attn.forward_with_weights(t)[0])
    torch.testing.assert_close(run(x)[0, :6], run(y)[0, :6])
    assert not torch.allclose(run(x)[0, 6:], run(y)[0, 6:])


def test_zero_ablation_zeroes_exactly_one_heads_contribution():
    attn = SelfAttention(8, 8, n_head=2, out_proj=False)
    x = torch.randn(1, 5, 8)
    out = attn(x, ablation=HeadAblation(torch.tensor([1.0, 0.0])))
    assert (out[..., 4:] == 0).all()
    torch.testing.assert_close(out[..., :4], attn(x)[..., :4])


@pytest.mark.parametrize("path", ["fast", "readable"])
def test_mean_ablation_puts_the_mean_in_place_of_exactly_one_head(path):
    attn = SelfAttention(8, 8, n_head=2, out_proj=False)
    x = torch.randn(1, 5, 8)
    fill = torch.arange(8.0).view(2, 4)  # head 1's stand-in output: 4, 5, 6, 7 at every position
    ablation = HeadAblation(torch.tensor([1.0, 0.0]), fill)
    run = attn if path == "fast" else (lambda t, **kw: attn.forward_with_weights(t, **kw)[0])
    out = run(x, ablation=ablation)
    assert torch.equal(out[..., 4:], fill[1].expand(1, 5, 4))
    torch.testing.assert_close(out[..., :4], run(x)[..., :4])


def test_bad_input_shapes_are_named():
    attn = SelfAttention(8, 8, n_head=2)
    with pytest.raises(ValueError, match="batch, seq, dim"):
        attn(torch.randn(8))
    with pytest.raises(ValueError, match="divisible"):
        SelfAttention(8, 10, n_head=3)
