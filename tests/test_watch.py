"""watch/: capturing attention, scoring heads on pronoun probes from the capture, heatmaps, TensorBoard logging.
(Head types: tests/test_head_types.py.)"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import custom_scalar_charts, tiny_model

from common.errors import UserError
from common.files import write_files
from data.probes import AlignedProbe
from data.probes import Probe as ProbeRecord  # the JSONL record; `Probe` below stands in for it by hand
from data.tokenizer import CharTokenizer
from model.gpt import GPT
from tests.commands import PATIENCE
from watch.measure import capture as capture_module
from watch.measure.capture import capture_attention, capture_from_patterns, captures
from watch.measure.heads import Ablation, ablation_for, display_token, head_name, parse_head
from watch.measure.probesets import PRONOUN, SENTENCES, ProbeSet, ProbeSets, from_file, sentences
from watch.measure.pronouns import ContinuationStats, HeadStats, ProbeReport, baselines
from watch.measure.reading import interpret, measure, read_pass, tally
from watch.show.heatmaps import FUTURE, PNG, HeatmapCanvas, SentenceHeatmaps, colours, head_titles, png_of
from watch.show.report import head_table, top_attended
from watch.show.tensorboard import (
    CHARTS,
    PALETTE,
    REFERENCES,
    TensorBoardWriter,
    chart_group,
    chart_groups,
    chart_layout,
    log_charts,
    log_evaluation,
    log_losses,
    log_scores,
    log_step,
)


@dataclass
class Probe:
    """watch/ reads only a probe's text, so hand-built positions need no more. (data.probes.Probe
    would also insist that its words occur in the text.)"""

    text: str
    pronoun: str = ""
    referent: str = ""
    distractor: str = ""
    continuations: list[str] | None = None


# --- hand-built patterns with known answers -------------------------------------------------

# Three probes: (length, pronoun_pos, referent_positions, distractor_positions).
SHAPES = [(6, 5, [1, 2], [4]), (6, 5, [4], [1]), (4, 3, [0], [2])]
# The pronoun row of each head in each probe, as {key_pos: weight}; None means uniform.
ROWS = {
    (0, 0): [{0: 0.8, 1: 0.05, 4: 0.15}, {0: 0.8, 4: 0.05, 1: 0.15}, {0: 0.5, 2: 0.5}],  # mostly a sink
    (0, 1): [{0: 0.6, 2: 0.3, 4: 0.1}, {0: 0.6, 4: 0.3, 1: 0.1}, {0: 0.9, 2: 0.1}],
    (1, 0): [{0: 0.05, 1: 0.5, 2: 0.4, 4: 0.05}, {0: 0.05, 4: 0.9, 1: 0.05}, {0: 0.9, 2: 0.1}],  # the resolver
    (1, 1): [None, None, None],
}


def pronoun_set(aligned: list[AlignedProbe]) -> ProbeSet:
    return ProbeSet(
        PRONOUN, [item.ids for item in aligned], aligned, logits_at=[item.continuation_pos for item in aligned]
    )


def head_stats(patterns: list[list[torch.Tensor]], aligned: list[AlignedProbe]) -> dict[str, HeadStats]:
    """Every head's pronoun scores, read from a capture made of these hand-built patterns."""
    probes = pronoun_set(aligned)
    return interpret(tally([capture_from_patterns(probes, patterns)], ProbeSets({PRONOUN: probes}))).pronouns.heads


def fake_probes() -> tuple[list[list[torch.Tensor]], list[AlignedProbe]]:
    patterns, aligned = [], []
    for index, (length, pronoun, ref, dis) in enumerate(SHAPES):
        layers = []
        for layer in range(2):
            # Every row uniform over the past, then the pronoun row as specified.
            p = torch.tril(torch.ones(2, length, length))
            p = p / p.sum(-1, keepdim=True)
            for head in range(2):
                spec = ROWS[(layer, head)][index]
                if spec is not None:
                    p[head, pronoun] = 0.0
                    for key, weight in spec.items():
                        p[head, pronoun, key] = weight
            layers.append(p)
        patterns.append(layers)
        tokens = [f"t{i}" for i in range(length)]
        aligned.append(
            AlignedProbe(Probe(" ".join(tokens), "it", "ref", "dis"), list(range(length)), tokens, pronoun, ref, dis)
        )
    return patterns, aligned


def test_head_stats_on_known_patterns():
    patterns, aligned = fake_probes()
    stats = head_stats(patterns, aligned)
    assert list(stats) == ["L0H0", "L0H1", "L1H0", "L1H1"]

    resolver = stats["L1H0"]
    assert resolver.referent == pytest.approx(0.9)
    assert resolver.distractor == pytest.approx(0.2 / 3)
    assert resolver.top1 == 1.0 and resolver.n_top1 == 3 and resolver.n_probes == 3
    # The probe whose referent sits at position 0 cannot be separated from the sink.
    assert resolver.n_no_sink == 2
    assert resolver.referent_no_sink == pytest.approx(0.9 / 0.95)
    assert resolver.distractor_no_sink == pytest.approx(0.05 / 0.95)

    sink = stats["L0H0"]
    assert sink.referent == pytest.approx(0.2)
    assert sink.distractor == pytest.approx(0.8 / 3)
    assert sink.top1 == 0.0  # the 0.5/0.5 tie in the third probe is not a win
    assert sink.referent_no_sink == pytest.approx(0.25)
    assert sink.distractor_no_sink == pytest.approx(0.75)

    # Loses to the sink raw, wins once the sink is removed.
    assert stats["L0H1"].referent == pytest.approx(0.5)
    assert stats["L0H1"].referent_no_sink == pytest.approx(0.75)
    assert stats["L0H1"].top1_no_sink == 1.0

    uniform = stats["L1H1"]
    assert uniform.referent == pytest.approx((2 / 6 + 1 / 6 + 1 / 4) / 3)
    assert uniform.top1 == pytest.approx(1 / 3)
    assert uniform.referent_no_sink == pytest.approx(((2 / 6) / (5 / 6) + (1 / 6) / (5 / 6)) / 2)
    assert uniform.top1_no_sink == pytest.approx(0.5)

    assert report_of(stats).best.name == "L1H0"


def report_of(heads: dict[str, HeadStats]) -> ProbeReport:
    continuation = ContinuationStats(None, None, None, 0, 0, 0)
    return ProbeReport(heads, 10, {"chance": 0.5, "first_noun": 0.5, "nearest_noun": 0.5}, continuation)


def test_best_head_breaks_ties_by_top1():
    def stats(layer, head, referent, top1):
        return HeadStats(layer, head, referent, 0.1, top1, None, None, None, 10, int(10 * top1), 0, 0)

    heads = {s.name: s for s in [stats(0, 0, 0.6, 0.7), stats(0, 1, 0.6, 0.9), stats(1, 0, 0.5, 1.0)]}
    assert report_of(heads).best.name == "L0H1"


def test_baselines():
    _, aligned = fake_probes()
    # First noun: referent first in probes 1 and 3. Nearest noun: referent nearer only in probe 2.
    assert baselines(aligned) == pytest.approx({"chance": 0.5, "first_noun": 2 / 3, "nearest_noun": 1 / 3})


def test_a_capture_from_patterns_of_the_wrong_shape_is_refused():
    patterns, aligned = fake_probes()
    patterns[0][1] = patterns[0][1][:, :5, :5]
    with pytest.raises(ValueError, match="sequence 0, layer 1"):
        head_stats(patterns, aligned)


def test_chunked_captures_add_up_to_the_same_scores(monkeypatch):
    """A probe set too big for one forward is split; the scores are sums over the chunks, so nothing changes."""
    model = tiny_model(vocab_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    sets = ProbeSets({PRONOUN: pronoun_set(model_probes())})
    whole = measure(model, sets)
    monkeypatch.setattr(capture_module, "BATCH_WEIGHTS", 2 * 2 * 2 * 12 * 12)  # two probes a forward
    chunked = measure(model, sets)
    assert (whole.forwards, chunked.forwards) == (1, 3)
    for name, values in whole.heads.items():
        torch.testing.assert_close(values, chunked.heads[name], atol=1e-6, rtol=1e-5, equal_nan=True)
    assert whole.numbers == pytest.approx(chunked.numbers)


def fake_report() -> ProbeReport:
    """The hand-built probes' report, with a continuation as a real pass would give it."""
    patterns, aligned = fake_probes()
    continuation = ContinuationStats(
        accuracy=0.5, distractor_rate=0.25, logit_diff=0.3, n=4, n_correct=2, n_logit_diff=4
    )
    return ProbeReport(head_stats(patterns, aligned), len(aligned), baselines(aligned), continuation)


def test_report_dict_and_table():
    report = fake_report()
    data = report.to_dict()
    json.dumps(data, allow_nan=False)  # JSON-able, no NaN
    assert data["best"]["name"] == "L1H0" and data["n_probes"] == 3
    assert set(data["heads"]) == {"L0H0", "L0H1", "L1H0", "L1H1"}
    assert {"referent", "distractor", "top1", "referent_no_sink", "top1_no_sink"} <= set(data["heads"]["L0H0"])
    assert data["continuation_accuracy"] == 0.5
    assert data["baselines"]["first_noun"] == pytest.approx(2 / 3)

    table = head_table(report).splitlines()
    ranked = [line.lstrip("* ").split()[1] for line in table[2:6]]
    assert ranked == ["L1H0", "L0H1", "L1H1", "L0H0"]
    assert table[2].startswith("*") and "L1H0" in table[2]
    assert not any(line.startswith("*") for line in table[3:6])
    # Aligned columns: every row of the table has the same width up to its last cell.
    assert len({line.index("L") for line in table[2:6]}) == 1
    assert "first noun 67%" in table[-2] and "continuation accuracy 50%" in table[-2]
    assert table[-1].startswith("how to read it: referent and distractor are the shares of the pronoun's attention")


def test_top_attended():
    pattern = torch.zeros(2, 3, 3)
    pattern[0, 2] = torch.tensor([0.02, 0.88, 0.10])
    pattern[1, 2] = torch.tensor([0.5, 0.25, 0.25])
    lines = top_attended(pattern, [" the", " dog", " ball"], 2, k=2, layer=1).splitlines()
    assert lines == ["L1H0: dog 0.88 | ball 0.10", "L1H1: the 0.50 | dog 0.25"]


# --- capture from a real model ---------------------------------------------------------------


def manual_patterns(model: GPT, ids: list[int]) -> list[torch.Tensor]:
    """Block by block, the readable attention of each layer on that layer's input."""
    idx = torch.tensor([ids])
    with torch.no_grad():
        x = model.wte(idx)
        if model.wpe is not None:
            x = x + model.wpe(torch.arange(len(ids)))
        patterns = []
        for block in model.blocks:
            _, weights = block.attn.forward_with_weights(block.ln_1(x))
            patterns.append(weights[0])
            x = block(x)
    return patterns


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_capture_matches_readable_path_layer_by_layer(arch):
    model = tiny_model(arch, vocab_size=32, dropout=0.1)
    if arch == "modern":  # zero-initialised projections would make every layer see the same input
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.2)
    sentences = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9, 7], list(range(16)), [7]]
    model.train()
    captured = capture_attention(model, sentences)
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    for ids, layers in zip(sentences, captured, strict=True):
        expected = manual_patterns(model, ids)
        assert len(layers) == len(expected) == 2
        for got, want in zip(layers, expected, strict=True):
            assert got.shape == (2, len(ids), len(ids))
            torch.testing.assert_close(got, want)


def test_capture_restores_mixed_modes():
    model = tiny_model(vocab_size=32)
    model.train()
    model.blocks[0].eval()
    before = [m.training for m in model.modules()]
    capture_attention(model, [[1, 2, 3]])
    assert [m.training for m in model.modules()] == before
    model.eval()
    capture_attention(model, [[1, 2, 3]])
    assert not model.training


def test_captured_rows_are_causal_distributions():
    model = tiny_model(vocab_size=32)
    for layers in capture_attention(model, [[5, 4, 3, 2, 1, 0, 9], [1, 1]]):
        for pattern in layers:
            t = pattern.shape[-1]
            torch.testing.assert_close(pattern.sum(-1), torch.ones(2, t))
            assert torch.all(pattern.masked_select(torch.ones(t, t, dtype=torch.bool).triu(1)) == 0)


def test_capture_checks_block_size():
    model = tiny_model(vocab_size=32)
    with pytest.raises(UserError, match="17 tokens.*block_size is 16"):
        capture_attention(model, [list(range(3)), [1] * 17])
    (layers,) = capture_attention(model, [[1] * 17], crop=True)
    assert layers[0].shape == (2, 16, 16)


# --- probes through a real model -------------------------------------------------------------


def model_probes() -> list[AlignedProbe]:
    gen = torch.Generator().manual_seed(1)
    probes = []
    for length in (6, 9, 12, 7):
        ids = torch.randint(0, 32, (length,), generator=gen).tolist()
        probes.append(
            AlignedProbe(
                Probe("p", "it", "a", "b"),
                ids,
                [str(i) for i in ids],
                length - 2,
                [1],
                [3],
                continuation_pos=length - 2,
                continuation_ids=[4, 5],
                distractor_continuation_ids=[6],
            )
        )
    probes.append(AlignedProbe(Probe("q", "it", "a", "b"), [1, 2, 3, 4, 5], list("12345"), 4, [0, 1], [2]))
    return probes


def test_logits_are_read_where_the_probe_set_asks_and_match_the_plain_forward():
    model = tiny_model(vocab_size=32)
    probes = model_probes()
    (capture,) = list(captures(model, pronoun_set(probes)))  # one forward, mixed lengths: padding is exercised
    assert capture.logits.shape == (5, 32) and capture.patterns[0].shape == (5, 2, 12, 12)
    with torch.no_grad():
        for row, item in enumerate(probes[:-1]):
            full, _ = model(torch.tensor([item.ids]), all_logits=True)
            torch.testing.assert_close(capture.logits[row], full[0, item.continuation_pos], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "modern"])
def test_a_padded_batch_holds_each_sentence_as_captured_alone(arch):
    model = tiny_model(arch, vocab_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    probes = model_probes()
    (capture,) = list(captures(model, pronoun_set(probes)))
    for i, item in enumerate(probes):
        n = len(item.ids)
        (alone,) = capture_attention(model, [item.ids])
        for layer, pattern in enumerate(alone):
            torch.testing.assert_close(capture.patterns[layer][i, :, :n, :n], pattern, atol=1e-6, rtol=1e-5)
            assert torch.all(capture.patterns[layer][i, :, :n, n:] == 0)


def test_the_pass_scores_as_the_whole_patterns_do():
    model = tiny_model(vocab_size=32)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    probes = model_probes()
    report = read_pass(model, ProbeSets({PRONOUN: pronoun_set(probes)})).pronouns
    whole = head_stats(capture_attention(model, [item.ids for item in probes]), probes)
    for name, stats in report.heads.items():
        for key in ("referent", "distractor", "top1", "referent_no_sink", "distractor_no_sink", "top1_no_sink"):
            assert getattr(stats, key) == pytest.approx(getattr(whole[name], key), abs=1e-6), (name, key)


def test_continuation_accuracy_and_ablation():
    model = tiny_model(vocab_size=32)
    probes = model_probes()
    sets = ProbeSets({PRONOUN: pronoun_set(probes)})
    plain = read_pass(model, sets).pronouns
    assert plain.n_probes == 5 and plain.continuation.n == 4 and plain.ablated == []

    # Continuation accuracy counts argmax hits among the probes that have a continuation.
    with torch.no_grad():
        rows = [model(torch.tensor([item.ids]), all_logits=True)[0][0, item.continuation_pos] for item in probes[:-1]]
    hits = sum(int(row.argmax()) in item.continuation_ids for item, row in zip(probes, rows, strict=False))
    assert plain.continuation_accuracy == hits / 4

    ablated = read_pass(model, sets, ablate=Ablation([(0, 1)])).pronouns
    assert ablated.ablated == ["L0H1"]
    # Layer 0's own patterns are computed before the ablated output; layer 1 sees the change.
    assert ablated.heads["L0H1"].referent == pytest.approx(plain.heads["L0H1"].referent)
    assert ablated.heads["L1H0"].referent != pytest.approx(plain.heads["L1H0"].referent, abs=1e-7, rel=0)
    assert ablated.continuation.logit_diff != pytest.approx(plain.continuation.logit_diff, abs=1e-7, rel=0)
    assert ablation_for(["L0H1"], 2, 2) == Ablation([(0, 1)]) and ablation_for([], 2, 2) is None
    with pytest.raises(ValueError):
        measure(model, sets, ablate=Ablation([(2, 0)]))


# --- heatmaps ----------------------------------------------------------------------------------


def test_display_token():
    assert display_token(" dog") == "·dog"
    assert display_token("\n") == "\\n"
    assert display_token(" ") == "·"
    assert display_token("dog") == "dog"


def cell_colour(canvas: HeatmapCanvas, image: np.ndarray, panel: int, q: int, k: int) -> tuple:
    """The colour at a cell's top-left corner (clear of its number)."""
    x0, y0 = canvas._origin(panel)
    return tuple(image[y0 + q * canvas.cell + 1, x0 + k * canvas.cell + 1])


def test_head_image_labels_mask_and_numbers(tmp_path):
    from PIL import Image

    tokens = [" The", " dog", " saw", "\n", " it"]
    pattern = torch.tril(torch.ones(5, 5))
    pattern = pattern / pattern.sum(-1, keepdim=True)
    canvas = HeatmapCanvas(tokens, 1)
    image = canvas.draw([pattern], ["L1H0"])
    assert canvas.labels == ["·The", "·dog", "·saw", "\\n", "·it"] and canvas.titles == ["L1H0"]
    # The future is blank, the past coloured by its weight: 1 (bright) in the first row, 1/5 in the last.
    assert cell_colour(canvas, image, 0, 0, 1) == FUTURE and cell_colour(canvas, image, 0, 3, 4) == FUTURE
    assert cell_colour(canvas, image, 0, 0, 0) == tuple(colours(np.array(1.0)))
    assert cell_colour(canvas, image, 0, 4, 2) == tuple(colours(np.array(0.2)))
    assert len(canvas.numbers[0]) == 5 * 6 // 2 and canvas.numbers[0][(4, 4)] == ".20"  # one per visible cell
    [path] = write_files({tmp_path / "figs" / "head.png": png_of(image)}, PNG, "the heatmap", "--png_dir")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), image)


def test_colours_run_from_dark_to_bright():
    ramp = colours(np.linspace(0, 1, 5)).astype(int)
    assert (np.diff(ramp.sum(-1)) > 0).all()  # each step brighter: dark cells take white numbers, bright black
    assert tuple(colours(np.array(np.nan))) == FUTURE


def test_a_long_sentence_has_no_cell_numbers():
    canvas = HeatmapCanvas([str(i) for i in range(20)], 1)
    canvas.draw([torch.tril(torch.ones(20, 20)) / 20], ["L0H0"])
    assert canvas.numbers == [{}]


def test_layer_image_titles_every_head():
    pattern = torch.softmax(torch.randn(3, 4, 4).masked_fill(torch.ones(4, 4).triu(1).bool(), -math.inf), -1)
    canvas = HeatmapCanvas(["a", "b", "c", "d"], 3)
    assert canvas.draw(list(pattern), head_titles(1, 3, best="L1H2"), "layer 1").ndim == 3
    assert canvas.titles == ["L1H0", "L1H1", "L1H2 (best)"]


def test_a_canvas_draws_new_weights_and_shows_only_numbers_that_matter():
    tokens = ["a", "b", "c"]
    first = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
    second = torch.tensor([[1.0, 0, 0], [0.9, 0.1, 0], [0.0, 0.25, 0.75]])
    canvas = HeatmapCanvas(tokens, 1)
    canvas.draw([first], ["step 0"])
    image = canvas.draw([second], ["step 1"])
    assert canvas.titles == ["step 1"]
    # Weights below 0.05 show no number.
    assert canvas.numbers[0] == {(0, 0): "1", (1, 0): ".90", (1, 1): ".10", (2, 0): "", (2, 1): ".25", (2, 2): ".75"}
    assert cell_colour(canvas, image, 0, 2, 2) == tuple(colours(np.array(0.75)))
    with pytest.raises(ValueError, match="1 panels, got 2 patterns"):
        canvas.draw([first, second], ["x", "y"])


@pytest.mark.parametrize("n_panels", [1, 4])
def test_a_redrawn_heatmap_is_the_picture_a_fresh_one_draws(n_panels):
    # Later draws paint only what changes over the background kept from the first; the picture
    # must be the one a canvas made for these weights alone shows.
    tokens = [" the", " dog", " saw", " it"]
    torch.manual_seed(1)
    rows = [torch.softmax(torch.randn(n_panels, 4, 4), -1) for _ in range(2)]
    titles = [[f"H{i} step {s}" for i in range(n_panels)] for s in ("12", "21")]
    reused = HeatmapCanvas(tokens, n_panels, highlight_query=3)
    first = reused.draw(list(rows[0]), titles[0], "layer 0, step 12")
    again = reused.draw(list(rows[1]), titles[1], "layer 0, step 21")
    fresh = HeatmapCanvas(tokens, n_panels, highlight_query=3).draw(list(rows[1]), titles[1], "layer 0, step 21")
    assert again.shape == first.shape and again.dtype == np.uint8 and again.shape[-1] == 3
    assert not np.array_equal(again, first)
    np.testing.assert_array_equal(again, fresh)


def test_sentence_heatmaps_reuse_their_figures_between_steps():
    tokenizer = CharTokenizer.from_text("abc ")
    model = tiny_model(vocab_size=tokenizer.vocab_size, block_size=8, n_embd=8, seed=None).train()
    texts = ["abc", "cab a", "abc ", "abc"]  # each sentence a tag of its own, a sentence watched twice too
    sets = ProbeSets({SENTENCES: sentences(texts, tokenizer, 8)})
    shown = [(text, tokenizer.token_strings(ids)) for text, ids in zip(texts, sets.get(SENTENCES).ids, strict=True)]
    heatmaps = SentenceHeatmaps(shown)

    def images(step):
        reading = read_pass(model, sets)
        return [(tag, heatmaps.canvases[tag]) for tag, image in heatmaps.images(step, reading)]

    first, second = images(0), images(10)
    assert sorted(heatmaps.canvases) == sorted(
        f"attention/{name}/layer{layer}" for name in ("abc", "cab a", "abc ", "abc (2)") for layer in (0, 1)
    )
    assert first == second
    assert heatmaps.canvases["attention/abc /layer0"].tokens == ["a", "b", "c", " "]
    assert heatmaps.canvases["attention/abc/layer0"].tokens == ["a", "b", "c"]


# --- TensorBoard -------------------------------------------------------------------------------


def test_a_pass_is_written_as_scalars_images_and_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text = "the dog saw a cat. it ran."
    tokenizer = CharTokenizer.from_text(text)
    model = tiny_model(vocab_size=tokenizer.vocab_size, block_size=32, seed=None).train()
    ids = tokenizer.encode(text)
    dog, cat, it = text.index("dog"), text.index("cat"), text.index("it")
    probe = AlignedProbe(
        Probe(text, "it", "dog", "cat", continuations=[" ran"]),
        ids,
        tokenizer.token_strings(ids),
        it + 1,
        [dog, dog + 1, dog + 2],
        [cat, cat + 1, cat + 2],
        continuation_pos=it + 1,
        continuation_ids=tokenizer.encode(" "),
        distractor_continuation_ids=tokenizer.encode("."),
    )
    sets = ProbeSets({PRONOUN: pronoun_set([probe])})
    with pytest.warns(UserWarning, match="not watching"):
        sets.add(SENTENCES, sentences([text, "a dog? no!"], tokenizer, 32))
    reading = read_pass(model, sets)
    results, report = reading.results, reading.pronouns
    assert results.forwards == 2 and len(results.patterns) == 1

    writer = TensorBoardWriter(tmp_path)
    log_evaluation(writer, 7, reading, [], SentenceHeatmaps([(text, tokenizer.token_strings(ids))]).images(7, reading))
    writer.close()
    assert report.n_probes == 1

    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    slug = "the dog saw a cat. it ran."
    assert set(tags["images"]) == {
        f"attention/{slug}/layer0",
        f"attention/{slug}/layer1",
        f"attention/{slug}/best_head",
    }
    expected = {
        "attention/referent/best",
        "attention/distractor/best",
        "attention/top1/best",
        "probes/continuation_accuracy",
    }
    assert expected <= set(tags["scalars"])
    for layer, head in ((0, 0), (0, 1), (1, 0), (1, 1)):  # each head's scores in its own run, one colour each
        run = EventAccumulator(str(tmp_path / head_name(layer, head))).Reload()
        scores = {f"attention/{score}/L{layer}" for score in ("referent", "top1", "distractor")}  # chart per layer
        assert scores <= set(run.Tags()["scalars"])
    best = events.Scalars("attention/referent/best")[0]
    assert best.step == 7 and best.value == pytest.approx(report.best.referent)
    (table,) = events.Tensors("attention/heads/text_summary")
    text = table.tensor_proto.string_val[0].decode()
    # The table as the terminal prints it, in a code block: the Text tab breaks no cell of it ("L0H / 0").
    rows = [line for line in text.splitlines() if line.startswith("    ")]
    # ref > dis: the referent against the other noun alone, said in the column's name (`top1` in tags and the JSON).
    assert rows[0].split() == "rank head referent distractor ref > dis ref (no sink) ref > dis (no sink)".split()
    assert len(rows) == 2 + 4 and "how to read it:" in text


def test_the_runs_own_scalars_go_beside_the_watchs():
    """What train.py's progress bar shows, in TensorBoard: every log_interval steps the training loss, the learning
    rate, the gradient norm (none without clipping) and the throughput; at each evaluation both losses."""
    logged = []

    class Writer:
        def add_scalar(self, tag, value, step):
            logged.append((tag, value, step))

    log_step(Writer(), 25, 2.5, 1e-3, 0.7, 1000.0)
    log_step(Writer(), 50, 2.4, 1e-3, None, 900.0)
    log_losses(Writer(), 50, 2.0, 1.9)
    assert logged == [
        ("loss/train", 2.5, 25),
        ("lr", 1e-3, 25),
        ("grad_norm", 0.7, 25),
        ("throughput/tokens_per_sec", 1000.0, 25),
        ("loss/train", 2.4, 50),
        ("lr", 1e-3, 50),
        ("throughput/tokens_per_sec", 900.0, 50),
        ("loss/val", 2.0, 50),
        ("loss/train_eval", 1.9, 50),
    ]


def test_custom_scalars_chart_every_head_a_layer_at_a_time(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    patterns, aligned = fake_probes()
    probes = pronoun_set(aligned)
    reading = interpret(tally([capture_from_patterns(probes, patterns)], ProbeSets({PRONOUN: probes})))
    writer = TensorBoardWriter(tmp_path)
    log_charts(writer, ProbeSets({PRONOUN: probes}), 2, 2)
    log_scores(writer, 5, reading)
    for tag in ("loss/train", "loss/val", "loss/train_eval", "probes/continuation_accuracy"):
        writer.add_scalar(tag, 1.0, 5)
    writer.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    assert not any(tag.startswith("attention/heads") for tag in events.Tags()["tensors"])  # no table: scalars only
    # The layout as TensorBoard reads it back, and the tags each chart draws (its regexes match tag starts).
    categories, charts = custom_scalar_charts(events, tmp_path)
    assert categories == ["attention heads", "head types", "composition"]  # pronoun probes measure that type too
    # A line per head, named after it (TensorBoard gives each run its own colour), and a chart per layer, so that
    # no two lines of a chart share one of TensorBoard's seven colours.
    # The run's own lines a chart each (they share its colour); beside every chart of shares, the run's flat line at
    # 1, which keeps TensorBoard's outlier scaling from clipping the line that climbs highest.
    assert {title: charts[title] for title in charts if title in CHARTS["attention heads"] or "weight," in title} == {
        "referent weight of the best head": ["attention/referent/best", "reference/all"],
        "ref > dis of the best head (how often the referent outweighs the other noun)": [
            "attention/top1/best",
            "reference/all",
        ],
        "referent weight, layer 0": ["L0H0/attention/referent/L0", "L0H1/attention/referent/L0", "reference/all"],
        "referent weight, layer 1": ["L1H0/attention/referent/L1", "L1H1/attention/referent/L1", "reference/all"],
        "training loss (nats/token)": ["loss/train"],
        "continuation accuracy": ["probes/continuation_accuracy", "reference/all"],
    }
    assert charts["ref > dis, layer 1"] == ["L1H0/attention/top1/L1", "L1H1/attention/top1/L1", "reference/all"]
    assert charts["pronoun, layer 0"] == [
        "L0H0/heads/pronoun/L0",
        "L0H1/heads/pronoun/L0",
        "reference/all",
        "reference/type_needs",
    ]
    top1 = EventAccumulator(str(tmp_path / "L1H0")).Reload().Scalars("attention/top1/L1")
    assert top1[0].value == pytest.approx(1.0)


def test_every_chart_shows_the_line_that_climbs_highest_whole_with_tensorboards_default_scaling(tmp_path):
    """TensorBoard's default scaling leaves the top and bottom 5% of a chart's points out of its scale, so the head
    that becomes the type late in a run would run off the top of its chart; the run's flat line at 1 beside every
    chart of shares keeps it whole (`tests/chart_scale.py` scales a chart as TensorBoard's page does)."""
    from tests.chart_scale import clipped, scale, smoothed

    writer = TensorBoardWriter(tmp_path)
    log_charts(writer, ProbeSets({PRONOUN: pronoun_set(fake_probes()[1])}), 2, 4)
    climbing = [0.1 + 0.8 * (step / 20) ** 4 for step in range(21)]  # L1H1 becomes a pronoun head at the end
    for step, value in enumerate(climbing):
        for head in range(4):
            writer.head(f"L1H{head}").add_scalar("attention/referent/L1", value if head == 1 else 0.1, step)
        for tag, reference in REFERENCES.items():
            writer.add_scalar(tag, reference, step)
    writer.close()
    assert clipped(tmp_path) == {}
    # The same lines without it: the climbing head runs off the top.
    assert max(smoothed(climbing)) > scale([climbing, *[[0.1] * len(climbing)] * 3])[1]


@pytest.mark.parametrize(("n_layer", "n_head"), [(2, 4), (2, 2), (3, 12), (1, 7), (2, 8)])
def test_no_chart_of_heads_holds_more_heads_than_tensorboard_has_colours(n_layer, n_head):
    """TensorBoard colours runs by the order they started in, seven colours round: a chart's heads follow each other
    in that order (a layer, or a run of a wider one) and are at most seven, so each has a colour of its own."""
    groups = chart_groups(n_layer, n_head)
    members = {group: [] for group in groups}
    for layer in range(n_layer):
        for head in range(n_head):
            members[chart_group(layer, head, n_head)].append(layer * n_head + head)  # the order the runs start in
    for order in members.values():
        assert len(order) <= PALETTE and order == list(range(order[0], order[0] + len(order)))
    assert sum(map(len, members.values())) == n_layer * n_head
    assert chart_groups(1, 12) == {"L0H0-6": "layer 0, heads 0-6", "L0H7-11": "layer 0, heads 7-11"}
    layout = chart_layout(ProbeSets(), n_layer, n_head)
    assert all(not title.endswith(", every head") for charts in layout.values() for title in charts)


def test_probes_and_sentences_that_do_not_fit_are_left_out_saying_so(tmp_path):
    tokenizer = CharTokenizer.from_text("abc ")
    path = tmp_path / "p.jsonl"
    record = {"text": "abc cab bca", "pronoun": "bca", "referent": "abc", "distractor": "cab"}
    path.write_text(json.dumps(record) + "\n")
    with pytest.warns(UserWarning, match="1 of 1 probes in .* longer than block_size=8"):
        assert len(from_file(PRONOUN, ProbeRecord, path, tokenizer, 8)) == 0
    with pytest.raises(UserError, match="line 1: 11 tokens, more than the model's block_size 8"):
        from_file(PRONOUN, ProbeRecord, path, tokenizer, 8, strict=True)
    with pytest.warns(UserWarning, match="first 8 of 11"):
        kept = sentences(["abc cab bca"], tokenizer, 8)
    assert [len(ids) for ids in kept.ids] == [8]


def test_parse_head_accepts_names():
    assert parse_head("L1H2") == (1, 2)
    assert parse_head(" l0h3 ", n_layer=1, n_head=4) == (0, 3)
    assert parse_head(head_name(11, 7)) == (11, 7)
    assert ablation_for(["L1H0", (0, 1), "l1h0"], 2, 2) == Ablation([(0, 1), (1, 0)])


@pytest.mark.parametrize("bad", ["1.2", "L1", "H1L2", "", "L1H2x", "layer1head2"])
def test_parse_head_rejects_bad_forms(bad):
    with pytest.raises(ValueError) as info:
        parse_head(bad)
    message = str(info.value)
    assert repr(bad) in message and "L<layer>H<head>" in message and "\n" not in message


@pytest.mark.parametrize(("bad", "what"), [("L2H0", "layers are 0..1"), ("L0H4", "heads are 0..3")])
def test_parse_head_rejects_out_of_range(bad, what):
    with pytest.raises(ValueError, match=what) as info:
        parse_head(bad, n_layer=2, n_head=4)
    assert "L0H0 to L1H3" in str(info.value)


def test_a_tensorboard_writer_that_cannot_write_warns_once_and_goes_on(tmp_path, monkeypatch, capfd):
    """The disk fills under TensorBoard's writer thread: one warning, no traceback from that thread,
    and every later call (the hparams at the end, close) is a no-op."""
    import errno
    import os
    import threading
    import time
    import warnings

    from common.errors import GptwatchWarning
    from common.files import mount_point
    from watch.show.tensorboard import TensorBoardWriter

    def append(self, filename, file_content, binary_mode=False):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("tensorboard.compat.tensorflow_stub.io.gfile.LocalFileSystem.append", append)
    printed = []  # what the writer thread's failure would print as a traceback
    monkeypatch.setattr(threading, "excepthook", printed.append)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer = TensorBoardWriter(tmp_path / "run")
        writer.add_scalar("loss", 1.0, 0)
        writer.add_scalar("loss", 1.0, 1)  # a new step sends the last one's scalars to the thread
        deadline = time.monotonic() + PATIENCE  # the thread writes (and fails) on its own
        while any(type(t).__name__ == "_AsyncWriterThread" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "TensorBoard's writer thread never met the full disk"
            time.sleep(0.01)
        for step in range(20):
            writer.add_scalar("loss", 1.0, step)
            writer.flush()
        writer.add_hparams({"lr": 0.1}, {"hparam/loss": 1.0})
        writer.close()
    assert [str(w.message) for w in caught if w.category is GptwatchWarning] == [
        f"cannot write TensorBoard logs to {tmp_path / 'run'} (No space left on device on the disk mounted at "
        f"{mount_point(tmp_path)}); going on without them: free disk space or choose another --log_dir"
    ]
    assert writer.failed and printed == [] and "Traceback" not in capfd.readouterr().err


def test_the_scalars_of_a_step_reach_tensorboard_as_one_event_each_value_at_its_step(tmp_path):
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    from watch.show.tensorboard import TensorBoardWriter

    def summaries(path):  # (step, [(tag, value)]) of each event that holds a summary, as written
        events = [Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]
        return [(e.step, [(v.tag, v.simple_value) for v in e.summary.value]) for e in events if e.HasField("summary")]

    writer = TensorBoardWriter(tmp_path)
    writer.add_scalar("a", 1.5, 0)
    writer.add_scalar("b", 2.5, 0)
    writer.add_text("note", "between", 0)  # written after step 0's scalars, before step 1's
    writer.add_scalar("a", 3.0, 1)
    writer.head("L0H0").add_scalar("a", 4.0, 1)
    writer.close()
    [events] = [p for p in tmp_path.iterdir() if p.is_file()]
    assert summaries(events) == [(0, [("a", 1.5), ("b", 2.5)]), (0, [("note/text_summary", 0.0)]), (1, [("a", 3.0)])]
    [head] = (tmp_path / "L0H0").iterdir()
    assert summaries(head) == [(1, [("a", 4.0)])]


def test_a_heatmap_reaches_tensorboard_pixel_for_pixel(tmp_path):
    """TensorBoardWriter encodes RGB byte images itself (fast PNG); other images take SummaryWriter's path."""
    import io

    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from watch.show.tensorboard import TensorBoardWriter

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    writer = TensorBoardWriter(tmp_path)
    writer.add_image("heatmaps/fast", image, 7, dataformats="HWC")
    writer.add_image("heatmaps/float", image.astype(np.float32) / 255, 8, dataformats="HWC")
    writer.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0}).Reload()
    for tag, step in (("heatmaps/fast", 7), ("heatmaps/float", 8)):
        [event] = events.Images(tag)
        decoded = np.asarray(Image.open(io.BytesIO(event.encoded_image_string)).convert("RGB"))
        assert event.step == step and (event.width, event.height) == (53, 37)
        assert np.abs(decoded.astype(int) - image.astype(int)).max() <= (0 if tag == "heatmaps/fast" else 1)
