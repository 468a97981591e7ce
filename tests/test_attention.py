"""SelfAttention: the readable path is the reference, the fast path must match it."""

import math

import pytest
import torch

from model import SelfAttention
from model.attention import POSITION_BIAS_SCALE
from model.hooks import attached, removed_heads


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


@pytest.mark.parametrize(
    "batch,T,d,heads", [(1, 1, 8, 1), (2, 1, 16, 4), (3, 7, 16, 2), (2, 64, 32, 4), (1, 33, 24, 3)]
)
@pytest.mark.parametrize("rotary_qknorm", [False, True])
def test_fast_and_readable_paths_agree(batch, T, d, heads, rotary_qknorm):
    attn = SelfAttention(
        d, d, n_head=heads, rotary=rotary_qknorm and (d // heads) % 2 == 0, qk_norm=rotary_qknorm
    ).eval()
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


UNBATCHED = {"plain": {}, "rotary+qk_norm": {"rotary": True, "qk_norm": True}, "relative": {"relative_positions": True}}


@pytest.mark.parametrize("options", UNBATCHED.values(), ids=UNBATCHED)
def test_the_unbatched_form_is_a_batch_of_one_on_both_paths(options):
    torch.manual_seed(0)
    attn = SelfAttention(16, 16, n_head=2, max_len=16, **options).eval()
    if attn.position_bias is not None:
        with torch.no_grad():
            attn.position_bias.normal_(0.0, 0.1)
    x = torch.randn(9, 16)
    torch.testing.assert_close(attn(x), attn(x.unsqueeze(0))[0])
    torch.testing.assert_close(attn(x), attn.forward_with_weights(x)[0], atol=1e-5, rtol=1e-5)
    for removed in ({}, {"hook_z": removed_heads([1], torch.randn(2, 8))}):  # the sites see either form too
        with attached(attn, removed):
            readable, weights = attn.forward_with_weights(x)
            batched, batched_weights = attn.forward_with_weights(x.unsqueeze(0))
        assert readable.shape == (9, 16) and weights.shape == (2, 9, 9)  # [head, query_pos, key_pos]
        torch.testing.assert_close(readable, batched[0])
        torch.testing.assert_close(weights, batched_weights[0])


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
    with attached(attn, {"hook_z": removed_heads([1])}):  # the readable path's site of the heads' outputs
        out = attn.forward_with_weights(x)[0]
    assert (out[..., 4:] == 0).all()
    torch.testing.assert_close(out[..., :4], attn(x)[..., :4])


def test_mean_ablation_puts_the_mean_in_place_of_exactly_one_head():
    attn = SelfAttention(8, 8, n_head=2, out_proj=False)
    x = torch.randn(1, 5, 8)
    fill = torch.arange(8.0).view(2, 4)  # head 1's stand-in output: 4, 5, 6, 7 at every position
    with attached(attn, {"hook_z": removed_heads([1], fill)}):
        out = attn.forward_with_weights(x)[0]
    assert torch.equal(out[..., 4:], fill[1].expand(1, 5, 4))
    torch.testing.assert_close(out[..., :4], attn.forward_with_weights(x)[0][..., :4])


def test_a_site_is_bare_after_its_run_and_records_what_the_path_passes_on():
    """The sites do nothing unless something is attached (the fast and readable paths agree), record what they pass
    on in TransformerLens's layouts, and are bare again afterwards, also when the run fails."""
    torch.manual_seed(0)
    attn = SelfAttention(8, 8, n_head=2).eval()
    x = torch.randn(3, 5, 8)
    with attached(attn, record=["hook_q", "hook_pattern", "hook_z"]) as cache:
        out, weights = attn.forward_with_weights(x)
    assert cache["hook_q"].shape == cache["hook_z"].shape == (3, 5, 2, 4)  # [batch, pos, head, d_head]
    assert torch.equal(cache["hook_pattern"], weights)
    torch.testing.assert_close(attn.out_proj(cache["hook_z"].flatten(-2)), out)
    with pytest.raises(RuntimeError), attached(attn, {"hook_z": lambda z: z[..., :1]}):
        attn.forward_with_weights(x)  # a wrong edit fails inside; the site is cleared all the same
    assert all(site.edit is None and site.cache is None for site in (attn.hook_q, attn.hook_z, attn.hook_pattern))
    with pytest.raises(ValueError, match="no site hook_y in this model; its sites: hook_q, hook_k"):
        with attached(attn, record=["hook_y"]):
            pass


def test_bad_input_shapes_are_named():
    attn = SelfAttention(8, 8, n_head=2)
    for shape in ((8,), (1, 2, 3, 8)):
        with pytest.raises(ValueError, match="batch, seq, dim"):
            attn(torch.randn(shape))
        with pytest.raises(ValueError, match="batch, seq, dim"):
            attn.forward_with_weights(torch.randn(shape))
    with pytest.raises(ValueError, match="divisible"):
        SelfAttention(8, 10, n_head=3)


# --- relative positions: a learned bias per head and distance --------------------------------------------


def relative_attention(d: int, heads: int, max_len: int, seed: int = 0) -> SelfAttention:
    """A layer with relative positions whose biases are not zero (they start at zero), so they show."""
    torch.manual_seed(seed)
    attn = SelfAttention(d, d, n_head=heads, max_len=max_len, relative_positions=True).eval()
    with torch.no_grad():
        attn.position_bias.normal_(0.0, 0.1)  # x POSITION_BIAS_SCALE: biases of a logit or two
    return attn


def explicit_relative_weights(x: torch.Tensor, attn: SelfAttention) -> torch.Tensor:
    """softmax(q·kᵀ / sqrt(d_k) + scale x b[h, i - j]) with the causal mask, one score at a time: [B, H, T, T]."""
    B, T, _ = x.shape
    H, D = attn.n_head, attn.head_dim
    queries = (x @ attn.W_query.weight.T).view(B, T, H, D)
    keys = (x @ attn.W_key.weight.T).view(B, T, H, D)
    scores = torch.full((B, H, T, T), float("-inf"))
    for i in range(T):
        for j in range(i + 1):
            dot = (queries[:, i] * keys[:, j]).sum(-1) / math.sqrt(D)  # [B, H]
            scores[:, :, i, j] = dot + POSITION_BIAS_SCALE * attn.position_bias[:, i - j]
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize(
    "batch,T,d,heads,max_len", [(1, 1, 8, 2, 8), (2, 7, 16, 4, 16), (3, 16, 16, 2, 16), (1, 5, 24, 3, 32)]
)
def test_relative_positions_the_fast_and_readable_paths_agree_and_the_weights_are_the_formula(
    batch, T, d, heads, max_len
):
    attn = relative_attention(d, heads, max_len)
    x = torch.randn(batch, T, d)
    readable, weights = attn.forward_with_weights(x)
    with torch.no_grad():
        torch.testing.assert_close(weights, explicit_relative_weights(x, attn), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(attn(x), readable, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("T,heads", [(1, 1), (6, 2), (12, 3)])
def test_relative_positions_the_fast_path_weighs_the_keys_as_the_readable_path_does(T, heads):
    """The fast path never returns its weights, but a layer can be made to output them: token t is the one-hot
    e_t, and every head's value of it is e_t again, so each head's context at query i is row i of its weights."""
    torch.manual_seed(1)
    attn = SelfAttention(T, heads * T, n_head=heads, out_proj=False, max_len=T, relative_positions=True).eval()
    with torch.no_grad():
        attn.position_bias.normal_(0.0, 0.1)
        attn.W_value.weight.copy_(torch.eye(T).repeat(heads, 1))  # [head x T, T]: e_t in every head
    x = torch.eye(T).unsqueeze(0)  # [1, T, T]: token t is e_t
    fast = attn(x).view(1, T, heads, T).transpose(1, 2)  # [1, head, query, key]
    _, readable = attn.forward_with_weights(x)
    torch.testing.assert_close(fast, readable, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(readable, explicit_relative_weights(x, attn).detach(), atol=1e-6, rtol=1e-5)


def test_relative_biases_start_at_zero_and_then_change_nothing_but_are_trained():
    torch.manual_seed(0)
    plain = SelfAttention(16, 16, n_head=2, max_len=16)
    torch.manual_seed(0)
    relative = SelfAttention(16, 16, n_head=2, max_len=16, relative_positions=True)
    assert relative.position_bias.shape == (2, 16) and not relative.position_bias.any()
    x = torch.randn(2, 9, 16)
    torch.testing.assert_close(relative(x), plain(x))
    relative(x).square().sum().backward()
    assert relative.position_bias.grad[:, :9].abs().min() > 0 and not relative.position_bias.grad[:, 9:].any()


@pytest.mark.parametrize("path", ["fast", "readable"])
def test_relative_positions_stay_causal_and_see_distance(path):
    attn = relative_attention(16, 2, 16)
    run = attn if path == "fast" else (lambda t: attn.forward_with_weights(t)[0])
    x = torch.randn(1, 10, 16)
    y = x.clone()
    y[0, 6:] = torch.randn(4, 16)
    torch.testing.assert_close(run(x)[0, :6], run(y)[0, :6])
    # The same token everywhere: q·k is the same for every pair, so only the biases tell the keys apart.
    same = torch.randn(1, 1, 16).expand(1, 10, 16)
    _, weights = attn.forward_with_weights(same)
    assert not torch.allclose(weights[0, :, -1, :], torch.full((2, 10), 0.1))
