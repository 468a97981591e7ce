"""watch/measure/composition.py: Q-, K- and V-composition of every pair of heads, from the weights. Equal to
TransformerLens's `all_composition_scores` on the exported model; exact on hand-built circuits; shown in
TensorBoard, `sample.py --heads` (text and JSON) and on the attention page; one line for a one-layer model."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from conftest import custom_scalar_charts, require_gpt2, tiny_model

from formats import load_model
from formats.transformerlens import quiet_deprecation, to_hooked_transformer
from tests.commands import run_sample, run_train, tiny_args
from tests.random_checkpoints import make_checkpoint
from watch.measure.composition import KINDS, ONE_LAYER_NOTE, composition, composition_scores, reads_from
from watch.measure.headtypes import TYPE_SETS
from watch.measure.probesets import ProbeSets
from watch.measure.reading import read_pass, untrained_like
from watch.show.heatmaps import composition_image
from watch.show.page import DATA_ID
from watch.show.tensorboard import TensorBoardWriter, log_charts, log_scores

TL_TOL = 1e-5


def transformer_lens():
    """TransformerLens 3.x, or the test is skipped saying how to install it."""
    module = pytest.importorskip(
        "transformer_lens", reason="transformer-lens is optional: pip install -r requirements-interop.txt to test this"
    )
    if not hasattr(module, "HookedTransformer"):
        pytest.skip(
            "this transformer-lens has no HookedTransformer (4.0 removed it); pip install -r requirements-interop.txt"
        )
    return module


@pytest.mark.parametrize("kind", ["gpt2-char", "gpt2-bpe", "modern-char", "modern-bias", "gpt2-attn-only"])
def test_the_scores_equal_transformer_lens_on_the_exported_file(kind, tmp_path):
    tl = transformer_lens()
    if kind.endswith("bpe") or kind == "modern-bias":
        require_gpt2()
    folder = make_checkpoint(tmp_path / kind, kind)
    path = tmp_path / "model.tl.pt"
    code, _, err = run_sample([f"--out_dir={folder}", "--export", "tl", str(path)])
    assert code == 0, err
    saved = torch.load(path)
    with quiet_deprecation():
        hooked = tl.HookedTransformer(saved["config"])
    hooked.load_state_dict(saved["state_dict"])
    ours = composition_scores(load_model(folder, torch.device("cpu")).model)
    for mode in KINDS:
        theirs = hooked.all_composition_scores(mode).detach().double()
        assert ours[mode].shape == theirs.shape == (2, 4, 2, 4)
        assert float((ours[mode] - theirs).abs().max()) < TL_TOL, mode
        assert float(ours[mode][0, :, 1].min()) > 0.01  # scores that could differ, not zeros on both sides


def test_three_layers_and_the_pairs_that_do_not_compose_agree_with_transformer_lens():
    transformer_lens()
    model = tiny_model(n_layer=3, n_head=2, n_embd=16)
    hooked = to_hooked_transformer(model)
    ours = composition_scores(model)
    later = (torch.arange(3)[None, None, :, None] > torch.arange(3)[:, None, None, None]).expand(3, 2, 3, 2)
    for mode in KINDS:
        theirs = hooked.all_composition_scores(mode).detach().double()
        assert float((ours[mode] - theirs).abs().max()) < TL_TOL, mode
        assert torch.all(ours[mode][~later] == 0) and torch.all(ours[mode][later] > 0)  # only later layers read


def test_a_head_that_writes_nothing_composes_with_nothing_where_transformer_lens_divides_zero_by_zero():
    transformer_lens()
    model = tiny_model("modern", n_layer=2, n_head=2, n_embd=16)  # "modern" starts with W_O = 0
    theirs = to_hooked_transformer(model).all_composition_scores("K").detach().double()
    assert torch.isnan(theirs[0, :, 1]).all() and torch.all(composition_scores(model)["K"] == 0)


# --- hand-built circuits ---------------------------------------------------------------------------------

E, D = 8, 4  # d_model, d_head: two heads a layer


def circuit(key_direction: torch.Tensor) -> torch.nn.Module:
    """Two layers of two heads, every attention weight zero but these: L0H0 copies the residual direction
    e0 into e5 (W_OV = e0 e5ᵀ, rank 1); L1H0's queries read e1 and its keys read `key_direction`; L1H1's
    queries read e5, its keys e2, and its values copy e5 into e7."""
    model = tiny_model(n_layer=2, n_head=2, n_embd=E)
    first, second = model.blocks[0].attn, model.blocks[1].attn
    with torch.no_grad():
        for attn in (first, second):
            for linear in (attn.W_query, attn.W_key, attn.W_value, attn.out_proj):
                linear.weight.zero_()
        # nn.Linear keeps [out, in]: head h is rows h*D.. of W_query/W_key/W_value and those columns of out_proj
        first.W_value.weight[0, 0] = 1.0  # L0H0's value feature 0 reads e0 ...
        first.out_proj.weight[5, 0] = 1.0  # ... and is written to e5
        second.W_query.weight[0, 1] = 1.0  # L1H0: query feature 0 reads e1
        second.W_key.weight[0] = key_direction  # key feature 0 reads key_direction
        second.W_query.weight[D, 5] = 1.0  # L1H1: query feature 0 reads e5
        second.W_key.weight[D, 2] = 1.0  # key feature 0 reads e2
        second.W_value.weight[D, 5] = 1.0  # value feature 0 reads e5 ...
        second.out_proj.weight[7, D] = 1.0  # ... and is written to e7
    return model


def unit(i: int) -> torch.Tensor:
    return torch.eye(E)[i]


@pytest.mark.parametrize("angle", [0.0, math.pi / 6, math.pi / 3, math.pi / 2])
def test_k_composition_is_the_cosine_between_what_the_earlier_head_writes_and_what_the_keys_read(angle):
    keys_read = math.cos(angle) * unit(5) + math.sin(angle) * unit(6)  # e5 is where L0H0 writes
    found = composition(circuit(keys_read))  # the weights are float32: cos(angle) to 1e-7
    assert found.pairs["K"]["L0H0->L1H0"] == pytest.approx(math.cos(angle), abs=1e-7)
    assert found.pairs["Q"]["L0H0->L1H0"] == pytest.approx(0.0, abs=1e-12)  # its queries read e1: untouched
    assert found.pairs["V"]["L0H0->L1H0"] == 0.0  # it has no values
    # L1H1 reads e5 through its queries and its values, not its keys (which read e2).
    assert (found.pairs["Q"]["L0H0->L1H1"], found.pairs["V"]["L0H0->L1H1"]) == pytest.approx((1.0, 1.0))
    assert found.pairs["K"]["L0H0->L1H1"] == 0.0
    assert found.sources("K", (1, 0))[0] == ("L0H0", pytest.approx(math.cos(angle), abs=1e-7))


def test_two_aligned_maps_of_rank_r_score_one_over_root_r():
    model = tiny_model(n_layer=2, n_head=2, n_embd=E)
    with torch.no_grad():
        for attn in (model.blocks[0].attn, model.blocks[1].attn):
            for linear in (attn.W_query, attn.W_key, attn.W_value, attn.out_proj):
                linear.weight.zero_()
            for i in range(D):  # head 0 of each layer: the identity on e0..e3, through all four features
                for linear in (attn.W_query, attn.W_key, attn.W_value):
                    linear.weight[i, i] = 1.0
                attn.out_proj.weight[i, i] = 1.0
    found = composition(model)
    for kind in KINDS:
        assert found.pairs[kind]["L0H0->L1H0"] == pytest.approx(1 / math.sqrt(D))


# --- where the scores are shown -------------------------------------------------------------------------


def test_a_one_layer_model_says_in_one_line_that_composition_needs_two(trained):
    assert composition(tiny_model(n_layer=1)) is None and reads_from(None, None) == {}
    code, out, err = run_sample([f"--out_dir={trained.char}", "--heads"])
    assert code == 0, err
    assert out.rstrip("\n").splitlines()[-1] == ONE_LAYER_NOTE
    code, out, err = run_sample([f"--out_dir={trained.char}", "--heads", "--json"])
    report = json.loads(out)
    assert report["composition"] is None and report["composition_untrained"] is None
    assert report["composition_note"] == ONE_LAYER_NOTE


def test_heads_gives_every_pair_of_each_kind_and_the_untrained_models(tmp_path):
    folder = make_checkpoint(tmp_path, "gpt2-char")
    model = load_model(folder, torch.device("cpu")).model
    code, out, err = run_sample([f"--out_dir={folder}", "--heads", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert "composition_note" not in report
    pairs = [f"L0H{a}->L1H{b}" for a in range(4) for b in range(4)]
    before = composition(untrained_like(model, 1337))  # the checkpoint names no seed: train.py's default
    for key, found in (("composition", composition(model)), ("composition_untrained", before)):
        assert list(report[key]) == list(KINDS)
        for kind in KINDS:
            assert list(report[key][kind]) == pairs
            assert report[key][kind]["L0H2->L1H1"] == found.pairs[kind]["L0H2->L1H1"]
    assert report["composition"]["K"] != report["composition_untrained"]["K"]

    code, out, err = run_sample([f"--out_dir={folder}", "--heads"])
    assert code == 0, err
    text = out[out.index("composition of the weights") :].splitlines()
    assert [line[:5] for line in text[1:4]] == ["  Q: ", "  K: ", "  V: "]
    best, value = composition(model).best("K")
    assert text[2].startswith(f"  K: {best} {value:.2f} ({before.pairs['K'][best]:.2f}), ")  # untrained in brackets


def test_heads_reads_an_attention_only_model_with_relative_positions(tmp_path):
    """No MLP and no position table: the head table, the composition and the page read attention alone."""
    folder = make_checkpoint(tmp_path, "gpt2-attn-only", relative_positions=True)
    model = load_model(folder, torch.device("cpu")).model
    code, out, err = run_sample([f"--out_dir={folder}", "--heads", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert len(report["heads"]) == 8
    assert report["composition"]["K"]["L0H2->L1H1"] == composition(model).pairs["K"]["L0H2->L1H1"] > 0.01
    code, out, err = run_sample(
        [f"--out_dir={folder}", "--attention=the dog saw the ball", "--device=cpu", f"--html={tmp_path / 'page.html'}"]
    )
    assert code == 0, err
    assert (tmp_path / "page.html").stat().st_size > 0


def test_tensorboard_charts_what_each_head_reads_from_every_earlier_head_and_the_matrix_as_an_image(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = tiny_model(n_layer=3, n_head=2, n_embd=16)
    untrained = read_pass(untrained_like(model, 5), ProbeSets(), kinds=TYPE_SETS, compose=True)
    reading = read_pass(model, ProbeSets(), untrained=untrained, compose=True)
    found, before = reading.composition, reading.untrained.composition
    assert before.pairs == composition(untrained_like(model, 5)).pairs  # the untrained model of the seed
    writer = TensorBoardWriter(tmp_path)
    log_charts(writer, ProbeSets(), 3, 2)
    for step in (10, 20):
        log_scores(writer, step, reading)
    writer.add_image("composition/matrix", composition_image(found, "step 20"), 20, dataformats="HWC")
    writer.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0, "scalars": 0, "images": 0})
    events.Reload()
    categories, charts = custom_scalar_charts(events, tmp_path)
    assert categories == ["composition"]
    for kind in KINDS:
        # A chart per reading head, a line per earlier head in that head's run (its colour), a layer at a time.
        # Beside them the run's flat line at 1, the most a composition score can be (it keeps every line whole).
        assert charts[f"{kind}-composition into L1H0"] == [
            *(f"L0H{h}/composition/{kind}/into_L1H0/L0" for h in (0, 1)),
            "reference/all",
        ]
        assert charts[f"{kind}-composition into L2H0, from layer 1"] == [
            *(f"L1H{h}/composition/{kind}/into_L2H0/L1" for h in (0, 1)),
            "reference/all",
        ]
        value = EventAccumulator(str(tmp_path / "L0H1")).Reload().Scalars(f"composition/{kind}/into_L2H0/L0")
        assert [e.step for e in value] == [10, 20]
        assert value[0].value == pytest.approx(found.pairs[kind]["L0H1->L2H0"])
        assert events.Scalars(f"composition/{kind}/untrained_best")[0].value == pytest.approx(before.best(kind)[1])
        assert charts[f"{kind}-composition, the best pair and the untrained model's"] == [
            f"composition/{kind}/best",
            f"composition/{kind}/untrained_best",
            "reference/all",
        ]
    assert len(charts) == 3 * (1 + 2 + 2 * 2)  # per kind: the best pair; L1H0, L1H1; L2H0, L2H1 from 2 layers each
    assert events.Tags()["images"] == ["composition/matrix"]


def test_the_page_lists_the_heads_a_head_reads_from_highest_first():
    model = circuit(unit(5))
    reads = reads_from(composition(model), composition(untrained_like(model, 0)))
    assert set(reads) == set(KINDS) and set(reads["K"]) == {"L1H0", "L1H1"}
    (first, value, was), second = reads["K"]["L1H0"]
    assert (first, value) == ("L0H0", 1.0) and second[:2] == ["L0H1", 0.0] and 0 < was < 1


def test_a_training_run_shows_composition_and_its_matrix_at_every_watch_point(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text = "the dog and it"
    code, out, err = run_train(
        tiny_args(tmp_path, "--n_layer=2", "--watch_interval=2", f"--watch_sentences={json.dumps([text])}")
    )
    assert code == 0, err
    events = EventAccumulator(str(tmp_path / "runs" / "t"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    writes = {head: EventAccumulator(str(tmp_path / "runs" / "t" / head)).Reload() for head in ("L0H0", "L0H1")}
    assert [e.step for e in writes["L0H0"].Scalars("composition/K/into_L1H1/L0")] == [0, 2, 3, 4, 6]  # evals 0, 3, 6
    assert [e.step for e in events.Images("composition/matrix")] == [0, 2, 3, 4, 6]  # with the heatmaps, every pass
    model = load_model(tmp_path / "out", torch.device("cpu")).model
    assert writes["L0H1"].Scalars("composition/V/into_L1H0/L0")[-1].value == pytest.approx(
        composition(model).pairs["V"]["L0H1->L1H0"]
    )
    assert "\ncomposition of the weights (Elhage et al. 2021)" in out
    page = (tmp_path / "out" / "attention.html").read_text(encoding="utf-8")
    reads = json.loads(re.search(rf'id="{DATA_ID}">(.*?)</script>', page, re.DOTALL).group(1))["reads"]
    assert [source for source, _, _ in reads["K"]["L1H1"]] == [
        name for name, _ in composition(model).sources("K", (1, 1))
    ]
