"""Activation patching, direct logit attribution and the logit lens (watch/measure/patching.py), on small random
models whose weights are large enough that logits spread over several units."""

import pytest
import torch

from common.errors import UserError
from data.tokenizer import build_tokenizer
from model.hooks import site_name, where
from tests.commands import TEXT
from tests.test_import import (
    SHAKESPEARE_CHARS,
    nanogpt,  # noqa: F401 (the fixture holding nanoGPT's model.py)
    nanogpt_model,
    save_meta,
    save_nanogpt,
)
from watch.measure import patching
from watch.measure.patching import PARTS, Pair, analyse, pair_for, part_rows, patched, runs, sizes_of, watched


def random_model(arch: str = "gpt2", seed: int = 0, **sizes):
    """A 2-layer, 4-head model over `TEXT`'s characters with weights of std 0.3 (norm gains around 1), in eval mode."""
    from model import GPT, GPTConfig

    tokenizer = build_tokenizer("char", TEXT)
    torch.manual_seed(seed)
    config = dict(vocab_size=tokenizer.vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=32, arch=arch)
    model = GPT(GPTConfig(**{**config, **sizes})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.3)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.add_(1.0)
    return model, tokenizer


def a_pair(model, tokenizer, clean: str = "the dog saw it", corrupted: str = "the log saw it") -> Pair:
    """The pair with answers the model's two greedy next tokens, or, where they agree, two fixed tokens, the one the
    clean prompt prefers more than the corrupted one does as the right answer (so the pair is measured)."""
    try:
        return pair_for(model, tokenizer, clean, corrupted)
    except UserError:
        pair = pair_for(model, tokenizer, clean, corrupted, answer="a", wrong="e")
    clean_diff, corrupted_diff = (float(d[0]) for d in runs(model, [pair]).gaps)
    return pair if clean_diff > corrupted_diff else Pair(pair.clean, pair.corrupted, pair.wrong, pair.answer)


@pytest.mark.parametrize(
    "arch,sizes", [("gpt2", {}), ("gpt2", {"bias": True}), ("modern", {}), ("gpt2", {"attn_only": True})]
)
def test_attribution_and_its_bias_terms_add_up_to_the_clean_logit_difference(arch, sizes):
    model, tokenizer = random_model(arch, **sizes)
    found = analyse(model, a_pair(model, tokenizer))
    parts = found.attribution
    total = parts["heads"].sum() + parts["embeddings"] + parts["biases"] + parts["norm_bias"]
    total += parts["mlps"].sum() if parts["mlps"] is not None else 0.0
    assert abs(float(total) - found.clean_diff) < 1e-4, (float(total), found.clean_diff)
    assert abs(found.clean_diff) > 0.01  # something to split


def test_patching_a_prompt_into_itself_changes_nothing():
    model, tokenizer = random_model()
    ids = tokenizer.encode("the dog saw it")
    pair = Pair(ids, ids, *tokenizer.encode("ae"))  # pair_for refuses such a pair: the mechanism is tested here
    both = runs(model, [pair])
    clean_diff = float(both.gaps[0][0])
    diffs, _ = patched(model, both, part_rows(list(PARTS), sizes_of(model, len(ids)), both.cache, 1)[0])
    assert torch.allclose(diffs, torch.full_like(diffs, clean_diff), atol=1e-5)
    found = analyse(model, pair)
    assert not found.measured and all(share.isnan().all() for share in found.shares.values())  # none made up


def test_the_residual_stream_entering_layer_0_restores_the_clean_run():
    model, tokenizer = random_model()
    pair = a_pair(model, tokenizer)
    both = runs(model, [pair])
    everywhere = {site_name("resid_pre", 0): where(torch.tensor(True), both.cache["resid_pre", 0][:1])}
    restored, _ = model.run_with_cache(both.idx[1:], edits=everywhere, logits_at=both.last[1:])
    assert torch.allclose(restored[0], both.logits[0], atol=1e-5)
    # Position by position: the prompts differ at one character (position 4), and only there does it restore it all.
    residual = analyse(model, pair).shares["residual"]
    assert abs(float(residual[0, 4]) - 1.0) < 1e-5
    others = torch.cat([residual[0, :4], residual[0, 5:]])
    assert others.abs().max() < 1e-5


def test_in_one_attention_only_layer_a_head_patched_everywhere_is_the_head_patched_at_the_last_position():
    model, tokenizer = random_model(n_layer=1, attn_only=True)
    shares = analyse(model, a_pair(model, tokenizer)).shares
    # Other positions' outputs stay at their own positions: the last position's logits never see them.
    assert shares["positions"][0, :, :-1].abs().max() < 1e-5
    assert torch.allclose(shares["positions"][0, :, -1], shares["heads"][0], atol=1e-5)
    # Not so their values: the last position reads them. A query is read only at its own position.
    assert shares["values_by_position"][0, :, :-1].abs().max() > 1e-3
    assert shares["queries_by_position"][0, :, :-1].abs().max() < 1e-5
    assert torch.allclose(shares["queries_by_position"][0, :, -1], shares["queries"][0], atol=1e-5)


def test_each_part_has_its_shape_and_a_pattern_patched_is_not_an_output_patched():
    model, tokenizer = random_model()
    pair = a_pair(model, tokenizer)
    shares, T = analyse(model, pair).shares, len(pair.clean)
    # A head's pattern patched where the values are the corrupted run's is not its output patched: the two differ.
    assert not torch.allclose(shares["patterns"], shares["heads"], atol=1e-3)
    shapes = {part: tuple(value.shape) for part, value in shares.items()}
    assert shapes == {
        **{part: (2, 4) for part in ("heads", "patterns", "queries", "keys", "values")},
        **{part: (2, 4, T) for part in ("positions", "queries_by_position", "keys_by_position", "values_by_position")},
        "residual": (2, T),
        "mlps": (2,),
        "mlps_by_position": (2, T),
    }


def test_the_patched_runs_give_the_same_figures_however_many_share_a_forward(monkeypatch):
    model, tokenizer = random_model()
    pair = a_pair(model, tokenizer)
    one_batch = analyse(model, pair)
    monkeypatch.setattr(patching, "PATCHED_ROWS", 7)
    chunked = analyse(model, pair)
    for part in patching.PARTS:
        assert torch.allclose(chunked.shares[part], one_batch.shares[part], atol=1e-6), part


def test_the_logit_lens_after_the_last_layer_is_the_model_output():
    model, tokenizer = random_model()
    pair = a_pair(model, tokenizer)
    found = analyse(model, pair)
    with torch.no_grad():
        logits = model(torch.tensor([pair.clean]))[0][0, -1]
    rank, probability = found.lens[-1]
    assert rank == 1 + int((logits > logits[pair.answer]).sum())  # rank 1: the top token
    assert abs(probability - float(logits.softmax(-1)[pair.answer])) < 1e-5
    assert len(found.lens) == model.config.n_layer


@pytest.mark.parametrize(
    "clean,corrupted,answer,wrong,message",
    [
        ("the dog", "the do", None, None, "the clean prompt has 7 tokens and the corrupted one 6"),
        ("the dog", "the cat", "ab", "a", "--answer 'ab' is 2 tokens"),
        ("the dog", "the cat", "a", "a", "the right and the wrong answer are the same token 'a'"),
        ("", "", None, None, "each need at least one token"),
    ],
)
def test_a_pair_that_cannot_be_patched_is_refused_in_one_line(clean, corrupted, answer, wrong, message):
    model, tokenizer = random_model()
    with pytest.raises(UserError, match=message) as raised:
        pair_for(model, tokenizer, clean, corrupted, answer, wrong)
    assert "\n" not in str(raised.value)


# --- equal to TransformerLens -------------------------------------------------------------------------------------

TL_TOL = 1e-4


def transformer_lens_figures(hooked, pair: Pair) -> dict[str, torch.Tensor]:
    """TransformerLens's own figures for `pair`: its patching helpers with the normalised logit difference as metric,
    and the direct logit attribution of its cache (`stack_head_results` + `apply_ln_to_stack`, times the final norm's
    weight, onto W_U[:, right] - W_U[:, wrong])."""
    tl_patching = pytest.importorskip("transformer_lens.patching")
    clean, corrupted = torch.tensor([pair.clean]), torch.tensor([pair.corrupted])
    with torch.no_grad():
        clean_logits, cache = hooked.run_with_cache(clean)
        corrupted_logits = hooked(corrupted)

    def diff(logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1, pair.answer] - logits[0, -1, pair.wrong]

    clean_diff, corrupted_diff = diff(clean_logits), diff(corrupted_logits)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return (diff(logits) - corrupted_diff) / (clean_diff - corrupted_diff)

    quiet = dict(model=hooked, corrupted_tokens=corrupted, clean_cache=cache, patching_metric=metric)
    direction = hooked.W_U[:, pair.answer] - hooked.W_U[:, pair.wrong]
    heads = cache.apply_ln_to_stack(cache.stack_head_results(layer=-1, pos_slice=-1), layer=-1, pos_slice=-1)
    mlps = torch.stack([cache[f"blocks.{layer}.hook_mlp_out"][:, -1] for layer in range(hooked.cfg.n_layers)])
    mlps = cache.apply_ln_to_stack(mlps, layer=-1, pos_slice=-1)
    n_layer, n_head = hooked.cfg.n_layers, hooked.cfg.n_heads

    def whole_layer(corrupted_activation, index, clean_activation):  # index = [layer]: every position at once
        return clean_activation

    mlps_patched = tl_patching.generic_activation_patch(
        **quiet, patch_setter=whole_layer, activation_name="mlp_out", index_axis_names=("layer",)
    )
    by_position = {  # TransformerLens lays these out [layer, pos, head]; ours [layer, head, pos]
        name: getattr(tl_patching, f"get_act_patch_attn_head_{site}_by_pos")(**quiet).permute(0, 2, 1)
        for name, site in (("positions", "out"), ("queries_by_position", "q"), ("keys_by_position", "k"))
        + (("values_by_position", "v"),)
    }
    return {
        "heads": tl_patching.get_act_patch_attn_head_out_all_pos(**quiet),
        **by_position,
        "residual": tl_patching.get_act_patch_resid_pre(**quiet),
        "patterns": tl_patching.get_act_patch_attn_head_pattern_all_pos(**quiet),
        "queries": tl_patching.get_act_patch_attn_head_q_all_pos(**quiet),
        "keys": tl_patching.get_act_patch_attn_head_k_all_pos(**quiet),
        "values": tl_patching.get_act_patch_attn_head_v_all_pos(**quiet),
        "mlps": mlps_patched,
        "mlps_by_position": tl_patching.get_act_patch_mlp_out(**quiet),
        "attribution heads": ((heads[:, 0] * hooked.ln_final.w) @ direction).reshape(n_layer, n_head),
        "attribution mlps": (mlps[:, 0] * hooked.ln_final.w) @ direction,
    }


def test_patching_and_attribution_equal_transformer_lens_on_a_model_of_the_demo_shape():
    transformer_lens = pytest.importorskip(
        "transformer_lens", reason="transformer-lens is optional: pip install -r requirements-interop.txt to test this"
    )
    if not hasattr(transformer_lens, "HookedTransformer"):
        pytest.skip(
            "this transformer-lens has no HookedTransformer (4.0 removed it); pip install -r requirements-interop.txt"
        )
    from formats.transformerlens import to_hooked_transformer

    # The pronoun demo's shape (2 layers of 4 heads, 64 wide, biases) and its pair's (10 tokens, the last word differs).
    model, tokenizer = random_model(n_embd=64, bias=True, seed=1)
    pair = a_pair(model, tokenizer, "dog saw he", "dog saw it")
    ours = analyse(model, pair)
    theirs = transformer_lens_figures(to_hooked_transformer(model), pair)
    figures = {
        **ours.shares,
        "attribution heads": ours.attribution["heads"],
        "attribution mlps": ours.attribution["mlps"],
    }
    for name, value in figures.items():
        assert value.shape == theirs[name].shape, name
        assert float((value - theirs[name].detach().double()).abs().max()) < TL_TOL, name


# --- sample.py --patch ------------------------------------------------------------------------------------------


def test_sample_patch_json_holds_the_contract_and_the_table_names_the_heads(tmp_path):
    import json

    from tests.commands import run_sample
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    prompts = ["--patch", "the dog saw it", "the log saw it", "--answer", "a", "--wrong", "e"]
    code, out, err = run_sample([f"--out_dir={folder}", *prompts, "--json"])
    assert code == 0, err
    found = json.loads(out)
    assert len(found["clean_ids"]) == len(found["corrupted_ids"]) == 14
    assert (found["answer"], found["wrong"]) == ("a", "e") and found["answer_id"] != found["wrong_id"]
    assert set(found["patching"]) == set(patching.PARTS)  # every part (docs/patching.md)
    heads = {f"L{layer}H{head}" for layer in range(2) for head in range(4)}
    by_head = [part for part, what in patching.PARTS.items() if what.axes == patching.LAYER_HEAD]
    assert all(set(found["patching"][part]) == heads for part in by_head)
    assert {"queries", "keys", "values"} <= set(by_head) and set(found["patching"]["mlps"]) == {"MLP0", "MLP1"}
    assert len(found["patching"]["keys_by_position"]["L0H0"]) == len(found["patching"]["mlps_by_position"]["L1"]) == 14
    assert found["measured"] is True and found["logit_lens"][-1]["rank"] >= 1  # rank 1: the top token
    assert len(found["patching"]["positions"]["L0H0"]) == 14 and len(found["patching"]["residual"]["L1"]) == 14
    assert abs(found["patching"]["residual"]["L0"][4] - 1.0) < 1e-5  # the one character that differs
    assert set(found["attribution"]["mlps"]) == {"L0", "L1"} and len(found["logit_lens"]) == 2

    code, out, err = run_sample([f"--out_dir={folder}", *prompts, f"--png_dir={tmp_path / 'maps'}"])
    assert code == 0, err
    assert "output patched" in out and "logit lens" in out
    assert len(list((tmp_path / "maps").glob("the_dog_saw_it_*.png"))) == 1


def test_sample_patch_reads_pairs_from_a_jsonl_file_and_names_the_line_of_a_bad_one(tmp_path):
    import json

    from tests.commands import one_line, run_sample
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    pairs = tmp_path / "pairs.jsonl"
    good = {"clean": "the dog saw it", "corrupted": "the log saw it", "answer": "a", "wrong": "e"}
    pairs.write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "clean": "the cat saw it"}) + "\n")
    code, out, err = run_sample([f"--out_dir={folder}", "--patch", str(pairs), "--json"])
    assert code == 0, err
    found = json.loads(out)
    assert len(found["pairs"]) == 2
    assert set(found["mean"]) == {
        "patching",
        "patching_spread",
        "measured",
        "pairs",
        "mean_gap",
        "mean_gap_spread",
        "attribution",
    }
    # The one rule for several pairs: the share of their mean difference, each with its spread; no by-position part
    # (pairs of different lengths have no common positions).
    everywhere = {part for part, what in patching.PARTS.items() if "pos" not in what.axes}
    assert set(found["mean"]["patching"]) == set(found["mean"]["patching_spread"]) == everywhere

    pairs.write_text(json.dumps(good) + "\n" + json.dumps({**good, "corrupted": "the log saw"}) + "\n")
    code, _, err = run_sample([f"--out_dir={folder}", "--patch", str(pairs)])
    assert code == 1 and "pairs.jsonl line 2: the clean prompt has 14 tokens and the corrupted one 11" in one_line(err)


def test_a_hugging_face_folder_gives_the_figures_of_the_checkpoint_it_was_exported_from(tmp_path):
    import json

    pytest.importorskip("transformers", reason="transformers is optional: pip install -r requirements-interop.txt")
    from tests.commands import run_sample
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    code, _, err = run_sample([f"--out_dir={folder}", "--export", "hf", str(tmp_path / "hf")])
    assert code == 0, err
    prompts = ["--patch", "the dog saw it", "the log saw it", "--answer", "a", "--wrong", "e", "--json"]
    figures = []
    for model in (f"--out_dir={folder}", f"--init_from={tmp_path / 'hf'}"):
        code, out, err = run_sample([model, *prompts])
        assert code == 0, err
        figures.append(json.loads(out))
    ours, theirs = (f["patching"]["heads"] for f in figures)
    assert max(abs(ours[name] - theirs[name]) for name in ours) < 1e-4


def test_a_nanogpt_checkpoint_is_patched_like_any_other(tmp_path, request):
    import json

    from tests.commands import run_sample

    theirs, args = nanogpt_model(request.getfixturevalue("nanogpt"), n_head=2)
    with torch.no_grad():  # weights large enough that the two prompts' logit differences differ
        for p in theirs.parameters():
            p.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(p.numel()))
    path = save_nanogpt(theirs, args, tmp_path / "out-shakespeare-char")
    save_meta(path.parent / "meta.pkl", SHAKESPEARE_CHARS)
    code, out, err = run_sample(
        [f"--init_from={path.parent}", "--patch", "ROMEO: hi", "JULIE: hi", "--answer", "e", "--wrong", "a", "--json"]
    )
    assert code == 0, err
    found = json.loads(out)
    assert set(found["patching"]["heads"]) == {"L0H0", "L0H1", "L1H0", "L1H1"}
    assert found["measured"] and abs(found["clean_diff"] - found["corrupted_diff"]) >= patching.MIN_GAP


def test_what_the_watch_reads_of_several_pairs_of_any_lengths_is_the_share_of_their_mean():
    """Each pair's analysis brings back `share x gap` of its own gap; the watch's share is what they bring back
    together over their gaps together, and its attribution the mean of theirs."""
    model, tokenizer = random_model()
    pairs = [
        a_pair(model, tokenizer, "the dog saw it", "the log saw it"),
        a_pair(model, tokenizer, "a cat", "a rat"),
        a_pair(model, tokenizer, "the king and he", "the king and it"),
    ]
    each = [analyse(model, pair) for pair in pairs]
    gaps = torch.tensor([f.clean_diff - f.corrupted_diff for f in each], dtype=torch.float64)
    assert gaps.mean() > 2 * gaps.std() / 3**0.5  # the greedy answers: the model tells the prompts apart
    found = watched(model, pairs)
    for part, name in patching.WATCHED_NAMES.items():
        brought_back = torch.stack([f.shares[part].double() * gap for f, gap in zip(each, gaps, strict=True)])
        share = brought_back.sum(0) / gaps.sum()
        if patching.PARTS[part].axes == ("layer",):  # one number a layer
            share = torch.stack([found[f"{name}{layer}"] for layer in range(2)]) - share
            assert share.abs().max() < 1e-5
        else:
            assert torch.allclose(found[name], share, atol=1e-5), part
            assert (found[f"{name}_spread"] > 0).all()
    assert torch.allclose(found["attribution"], torch.stack([f.attribution["heads"] for f in each]).mean(0), atol=1e-5)
    # `sample.py --patch FILE` takes the same rule: the share of the pairs' mean, with the same spread.
    mean = patching.mean_over(each)
    assert torch.allclose(mean.shares["heads"], found["patching"], atol=1e-5)
    assert torch.allclose(mean.spreads["heads"], found["patching_spread"], atol=1e-5)
    assert torch.allclose(mean.spreads["keys"], found["patching_keys_spread"], atol=1e-5)


def test_a_pair_whose_two_differences_nearly_agree_cannot_swamp_the_share():
    """Three pairs where a head brings back half of each gap, and one pair whose gap is 0.001: the share of the
    mean stays 0.5, where the mean of each pair's share would be thrown far off by dividing by 0.001."""
    gaps = torch.tensor([4.0, 5.0, 6.0, 0.001], dtype=torch.float64)
    brought_back = (gaps * 0.5).view(4, 1, 1).clone()
    brought_back[3] = 0.2  # noise on the pair with no gap: a share of 200 on its own
    share, spread = patching.share_of_mean(brought_back, gaps)
    assert abs(float(share) - (7.5 + 0.2) / 15.001) < 1e-9 and float(share) < 0.6
    assert float(spread) < 0.2
    assert float((brought_back[:, 0, 0] / gaps).mean()) > 50  # what the mean of the pairs' shares would say


def test_no_head_carries_an_answer_the_model_does_not_yet_prefer():
    """Gaps that straddle 0 (an untrained model on the watch's pairs): the mean gap is within its spread, so no share
    is measured, and the report says why instead of naming a head."""
    gaps = torch.tensor([0.3, -0.2, 0.1, -0.15], dtype=torch.float64)
    share, spread = patching.share_of_mean(torch.randn(4, 2, 2, dtype=torch.float64), gaps)
    assert share.isnan().all() and spread.isnan().all()
    negative = torch.tensor([-3.0, -4.0, -5.0], dtype=torch.float64)  # the model prefers the wrong answers
    assert patching.share_of_mean(torch.ones(3, 1, 1, dtype=torch.float64), negative)[0].isnan().all()


# --- the pairs the watch patches ------------------------------------------------------------------------------


def test_repeated_token_pairs_differ_only_in_the_token_before_the_answer():
    """The clean prompt: 20 distinct tokens, then their first 10 again, the answer the token that followed the 10th
    the first time. The corrupted one changes only the 10th token of the first copy: the answer stays where it was,
    and nothing earlier is followed by the last token any more. The wrong answer is a token neither prompt holds."""
    made = patching.repeat_pairs(list(range(40)), block_size=64)
    assert len(made) == 16 and made.kind == patching.PAIRS
    for pair in made.items:
        half = 10
        assert len(set(pair.clean[:20])) == 20 and pair.clean[20:] == pair.clean[:half] == pair.corrupted[20:]
        changed = [i for i in range(30) if pair.clean[i] != pair.corrupted[i]]
        assert changed == [half - 1] and pair.corrupted[half - 1] not in pair.clean
        assert pair.answer == pair.clean[half] == pair.corrupted[half]
        assert pair.wrong not in pair.clean + pair.corrupted
    assert "too small" in patching.repeat_pairs(list(range(40)), block_size=4)
    assert len(patching.repeat_pairs(list(range(12)), block_size=64).items[0].clean) == 15  # 10 distinct tokens
    assert "too small" in patching.repeat_pairs(list(range(5)), block_size=64)


def test_pronoun_probes_make_pairs_whose_pronoun_can_only_mean_the_other_noun(tmp_path):
    import json

    from conftest import require_gpt2

    from data.probes import Probe
    from watch.measure.probesets import PRONOUN, from_file

    require_gpt2()
    tokenizer = build_tokenizer("gpt2", TEXT)
    probes = tmp_path / "probes.jsonl"
    record = {"text": "the dog saw the ball and it rolled away", "pronoun": "it", "referent": "ball"}
    record |= {"distractor": "dog", "continuations": ["rolled"], "distractor_continuations": ["waved"]}
    probes.write_text(json.dumps(record) + "\n")
    made = patching.pronoun_pairs(from_file(PRONOUN, Probe, probes, tokenizer, 32), tokenizer)
    (pair,) = made.items
    assert tokenizer.decode(pair.clean) == "the dog saw the ball and it"
    assert tokenizer.decode(pair.corrupted) == "the dog saw the ball and he"  # a dog is he or she, a ball only it
    assert tokenizer.decode([pair.answer]) == " rolled" and tokenizer.decode([pair.wrong]) == " waved"


def test_sample_heads_on_an_untrained_model_says_no_head_carries_an_answer_yet(tmp_path):
    import json

    from tests.commands import run_sample
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    code, out, err = run_sample([f"--out_dir={folder}", "--heads"])
    assert code == 0, err
    assert out.count("no head carries an answer yet on 16 pairs of 20 repeated random tokens") == 2  # nor a path
    assert "carries the answer most" not in out
    code, out, err = run_sample([f"--out_dir={folder}", "--heads", "--json"])
    heads = json.loads(out)["heads"]
    assert all(head["patching"] is None and isinstance(head["attribution"], float) for head in heads.values())


def test_on_the_trained_induction_demo_the_circuit_carries_the_answer_through_the_induction_heads_keys():
    """The watch's repeated-token pairs change only the token before the answer in the first copy. On the trained
    induction demo the previous-token head carries the answer: it alone reads the changed token where the answer is
    found; and the head whose keys carry the most of it is an induction head, its keys more than its values:
    K-composition, each share with a spread small beside it."""
    from test_draws import draw, induction_demo

    from watch.measure.capture import capture_attention
    from watch.measure.heads import parse_head
    from watch.measure.probesets import token_pool
    from watch.measure.reading import measure

    model, tokenizer = induction_demo()
    pool = token_pool(None, tokenizer, "induction")
    sets = draw(pool, model.config.block_size, 0)
    sets.add(patching.PAIRS, patching.repeat_pairs(pool.tokens, model.config.block_size))
    results = measure(model, sets)
    layer_0 = capture_attention(model, [pool.tokens[:40]])[0][0]  # where layer 0's heads look from each token
    previous = max(range(2), key=lambda h: float(layer_0[h].diagonal(-1).mean()))  # the previous-token head
    head, share = results.best("patching")
    assert head == f"L0H{previous}" and share > 0.9 and results.head("patching_spread", *parse_head(head)) < 0.05
    keys, spread = results.best("patching_keys"), results.per_head("patching_keys_spread")
    assert keys[0] == results.best("induction")[0] and keys[1] > spread[keys[0]]
    assert keys[1] > results.per_head("patching_values")[keys[0]]


def test_the_attention_page_shows_the_patching_map_of_the_first_pair(tmp_path):
    from tests.commands import run_sample
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    page = tmp_path / "page.html"
    code, _, err = run_sample([f"--out_dir={folder}", "--attention", "the dog saw it", "--html", str(page)])
    assert code == 0, err
    html = page.read_text()
    # The caption says which pair it is: not the sentence above it.
    assert html.count('<figure><img alt="Activation patching on one pair, the first of the watch&#x27;s ') == 1
    assert "(not the sentence above)" in html and "data:image/png;base64," in html
