"""Pronoun agreement: the context file, its alignment, the scores on hand-built patterns and on
tiny models, ablation, and the training callback that logs it all."""

from __future__ import annotations

import json
import random

import pytest
import torch
from conftest import require_gpt2

import train
from bench.harness import load_config
from common.cli import run_cli
from common.errors import UserError
from data.probes import AgreementProbe, Probe, load_jsonl
from data.tokenizer import CharTokenizer, GPT2Tokenizer
from trainer import runtime
from trainer.start import starting_from
from trainer.trainer import Trainer
from watch.callback import AttentionWatch
from watch.measure.capture import capture_from_patterns
from watch.measure.probesets import AGREEMENT, ProbeSet, ProbeSets, from_file
from watch.measure.pronouns import HeadStats, ProbeReport, name_readers
from watch.measure.reading import interpret, tally

WOMEN, MEN = ["ann", "eve", "may"], ["bob", "tim", "ted"]
PLACES = ["out", "home", "up", "in"]


def corpus(n: int = 400) -> str:
    """Each sentence names one person, then the pronoun of that person's gender."""
    rng = random.Random(0)
    lines = []
    for _ in range(n):
        name = rng.choice(WOMEN + MEN)
        lines.append(f"{name} went {rng.choice(PLACES)} and {'she' if name in WOMEN else 'he'} sang.")
    return "\n".join(lines) + "\n"


def contexts() -> list[dict]:
    return [
        {
            "text": f"{name} went {place} and",
            "pronoun": "she" if name in WOMEN else "he",
            "wrong": "he" if name in WOMEN else "she",
            "person": name,
            "mention": mention,
        }
        for name in WOMEN + MEN
        for place, mention in (("out", "first"), ("home", "second"))
    ]


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


# --- the file and its alignment --------------------------------------------------------------


def test_contexts_align_to_the_position_that_predicts_the_pronoun(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", contexts())
    items = load_jsonl(path, AgreementProbe)
    assert len(items) == 12 and items[0].line == 1
    tokenizer = CharTokenizer.from_text(corpus())
    item = items[0].align(tokenizer)  # "ann went out and", then " she"
    # Characters: the pronoun's first token is its first letter, predicted from the space before it.
    assert tokenizer.decode(item.ids) == "ann went out and "
    assert tokenizer.decode([item.right_id, item.wrong_id]) == "sh"
    assert item.continuation_pos == len(item.ids) - 1
    assert tokenizer.decode([item.ids[p] for p in item.person_positions]) == "ann"


def test_gpt2_contexts_end_at_the_last_word_and_score_whole_pronouns(tmp_path):
    require_gpt2()
    tokenizer = GPT2Tokenizer.from_text(corpus())
    item = AgreementProbe("ann went out and", "she", "he", person="ann").align(tokenizer)
    assert tokenizer.decode(item.ids) == "ann went out and"
    assert tokenizer.token_strings([item.right_id, item.wrong_id]) == [" she", " he"]


@pytest.mark.parametrize(
    "record,words",
    [
        ({"text": "ann sat and", "pronoun": "she"}, ("line 1", "missing field(s) 'wrong'", "text, pronoun, wrong")),
        ({"text": "ann sat and", "pronoun": "she", "wrong": "he", "gender_": "f"}, ("line 1", "unknown field(s)")),
        ({"text": "ann sat and", "pronoun": "she", "wrong": "She"}, ("'pronoun' and 'wrong' are both",)),
        ({"text": "ann sat and", "pronoun": "she", "wrong": "he", "person": "an"}, ("person 'an' does not occur",)),
        ({"text": "ann sat and", "pronoun": "she", "wrong": "he", "frame": "2"}, ("'frame' must be an integer",)),
    ],
)
def test_a_bad_context_is_one_error_naming_its_line(tmp_path, record, words):
    with pytest.raises(UserError) as err:
        load_jsonl(write_jsonl(tmp_path / "a.jsonl", [record]), AgreementProbe)
    assert all(word in str(err.value) for word in words), err.value


def test_contexts_with_unknown_tokens_are_left_out_with_a_warning(tmp_path):
    path = write_jsonl(
        tmp_path / "a.jsonl", [*contexts(), {"text": "zoe went out and", "pronoun": "she", "wrong": "he"}]
    )
    with pytest.warns(UserWarning, match="1 of 13 agreement contexts"):
        assert len(from_file(AGREEMENT, AgreementProbe, path, CharTokenizer.from_text(corpus()), block_size=64)) == 12


# --- scores with known answers -----------------------------------------------------------------


def agreement_set(items: list) -> ProbeSet:
    return ProbeSet(AGREEMENT, [item.ids for item in items], items, logits_at=[item.continuation_pos for item in items])


def test_name_weights_on_a_hand_built_pattern(tmp_path):
    tokenizer = CharTokenizer.from_text(corpus())
    items = [AgreementProbe(**c).align(tokenizer) for c in contexts()[:2]]
    patterns = []
    for item in items:
        n = len(item.ids)
        layers = [torch.tril(torch.ones(2, n, n)) / torch.arange(1, n + 1)[:, None] for _ in range(2)]
        last = item.continuation_pos
        layers[1][0, last] = 0.0
        layers[1][0, last, item.person_positions] = 0.3  # three letters of "ann": 0.9 on the name
        layers[1][0, last, last] = 0.1
        patterns.append(layers)
    contexts_set = agreement_set(items)
    results = tally([capture_from_patterns(contexts_set, patterns)], ProbeSets({AGREEMENT: contexts_set}))
    weights = results.per_head("name_reading")
    assert weights["L1H0"] == pytest.approx(0.9)
    uniform = sum(3 / len(item.ids) for item in items) / len(items)  # every other row: uniform over the past
    assert weights["L0H0"] == pytest.approx(uniform) and weights["L1H1"] == pytest.approx(uniform)
    assert name_readers(weights) == ["L1H0"]
    assert name_readers({"L0H0": 0.1, "L0H1": 0.2}) == ["L0H1"]  # none reaches the bar: the strongest


def test_most_selective_is_the_best_top1_whatever_its_weight():
    def stats(name, referent, top1):
        layer, head = int(name[1]), int(name[3])
        return HeadStats(layer, head, referent, 0.1, top1, None, None, None, 10, int(10 * top1), 0, 0)

    heads = {"L0H0": stats("L0H0", 0.6, 0.5), "L1H0": stats("L1H0", 0.2, 0.8), "L1H1": stats("L1H1", 0.3, 0.8)}
    report = ProbeReport(heads, 10, {}, None)
    assert report.most_selective.name == "L1H1"  # ties on top-1 go to the larger referent weight


def test_agreement_counts_the_pronoun_the_model_prefers():
    """Logits that always rank 's' above 'h': right for every woman, wrong for every man."""
    tokenizer = CharTokenizer.from_text(corpus())
    items = [AgreementProbe(**c).align(tokenizer) for c in contexts()]
    logits = torch.zeros(tokenizer.vocab_size)
    logits[tokenizer.encode("s")[0]] = 1.0
    contexts_set = agreement_set(items)
    patterns = [
        [torch.tril(torch.ones(1, len(i.ids), len(i.ids))) / torch.arange(1, len(i.ids) + 1)[:, None]] for i in items
    ]
    results = tally(
        [capture_from_patterns(contexts_set, patterns, [logits] * len(items))], ProbeSets({AGREEMENT: contexts_set})
    )
    stats = interpret(results).agreement
    assert stats.accuracy == 0.5 and stats.n_correct == 6
    assert stats.by_mention == {"first": 0.5, "second": 0.5}
    assert stats.share == pytest.approx(0.5)  # sigmoid(+1) and sigmoid(-1) in equal numbers


# --- a tiny model that learns agreement, watched while it trains --------------------------------


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: dict[str, list[tuple[int, float]]] = {}
        self.texts: dict[str, list[str]] = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, value))

    def head(self, name):  # each head's own run: its scalars are not what these tests read
        return self

    def add_text(self, tag, text, step):
        self.texts.setdefault(tag, []).append(text)

    def add_custom_scalars(self, layout):
        self.layout = layout

    def add_image(self, tag, image, step, dataformats):  # the composition matrix, the sentences' heatmaps
        pass


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """300 steps of a 2-layer character model on sentences whose pronoun follows the name's gender,
    with the agreement watch logging at steps 0, 150 and 300."""
    tmp = tmp_path_factory.mktemp("agreement")
    (tmp / "corpus.txt").write_text(corpus())
    cfg = load_config(
        None,
        [
            f"--dataset={tmp / 'corpus.txt'}",
            f"--data_dir={tmp / 'prep'}",
            f"--out_dir={tmp / 'out'}",
            "--n_layer=2",
            "--n_head=2",
            "--n_embd=32",
            "--block_size=32",
            "--batch_size=16",
            "--max_iters=300",
            "--eval_interval=150",
            "--eval_iters=2",
            "--learning_rate=1e-2",
            "--warmup_iters=10",
            "--device=cpu",
            "--run_name=t",
        ],
    )
    trainer = Trainer.from_start(starting_from(cfg).prepared(), runtime.setup(cfg))
    agreement = write_jsonl(tmp / "a.jsonl", contexts())
    probes = write_jsonl(
        tmp / "p.jsonl",
        [
            {"text": "ann met bob and she sang.", "pronoun": "she", "referent": "ann", "distractor": "bob"},
            {"text": "ann met bob and he sang.", "pronoun": "he", "referent": "bob", "distractor": "ann"},
        ],
    )
    writer = FakeWriter()
    trainer.callbacks = [AttentionWatch(writer, probes=probes, agreement=agreement)]
    return trainer.fit(), writer, tmp


def test_the_watch_logs_agreement_and_ablation_at_each_evaluation(watched, capsys):
    result, writer, _ = watched
    accuracy = dict(writer.scalars["probes/agreement_accuracy"])
    assert list(accuracy) == list(range(0, 301, 25))  # every watch point, evaluations included
    assert accuracy[300] >= 0.9 > accuracy[0]
    assert {0, 150, 300} <= {step for step, _ in writer.scalars["probes/agreement_accuracy_first_mention"]}
    # Every agreement figure under one name in TensorBoard (probes/NAME) and the HParams (hparam/NAME).
    assert [step for step, _ in writer.scalars["probes/most_selective_top1"]] == [0, 150, 300]
    assert result.metrics["hparam/most_selective_top1"] == dict(writer.scalars["probes/most_selective_top1"])[300]
    # The heads that read the name do the work: without them the model is back to guessing.
    without = dict(writer.scalars["probes/agreement_accuracy_without_name_readers"])
    assert without[300] <= accuracy[300] - 0.25
    assert "name readers: L" in writer.texts["probes/ablated_heads"][-1]
    assert result.metrics["hparam/agreement_accuracy"] == accuracy[300]
    assert result.metrics["hparam/agreement_accuracy_without_name_readers"] == without[300]


def test_the_study_scores_a_checkpoint_at_both_positions_with_its_baselines(watched, capsys):
    from tools import pronoun_study

    _, _, tmp = watched
    # Each pair in both orders and with both pronouns: a balanced set, as tools/gender_probes.py writes.
    probes = [
        {
            "text": f"{a} met {b} and {p} sang.",
            "pronoun": p,
            "referent": w if p == "she" else m,
            "distractor": m if p == "she" else w,
        }
        for w, m in zip(WOMEN, MEN, strict=True)
        for a, b in ((w, m), (m, w))
        for p in ("she", "he")
    ]
    path = write_jsonl(tmp / "two.jsonl", probes)
    out = tmp / "study.json"
    assert (
        run_cli(
            pronoun_study.main,
            [
                str(tmp / "out" / "ckpt.pt"),
                f"--probes={path}",
                f"--agreement={tmp / 'a.jsonl'}",
                "--residual",
                "--init_seeds=2",
                f"--json={out}",
            ],
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "-- at the predicting position" in text and "untrained, same config" in text
    report = next(iter(json.loads(out.read_text()).values()))
    assert report["step"] == 300 and report["n_probes"] == 12
    assert report["baselines"]["first_noun"] == 0.5 and report["baselines"]["nearest_noun"] == 0.5
    # Before the pronoun nothing can tell the two probes of a pair apart: every head at exactly 50%.
    assert {h["top1"] for h in report["at_predicting"]["heads"].values()} == {0.5}
    assert report["agreement"]["agreement"]["accuracy"] >= 0.9
    assert len(report["residual"]["name_gender"]) == 3  # the embeddings and two layers
    assert len(report["init"]["best_top1"]) == 2


def test_train_py_logs_agreement_for_a_context_file(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.commands import tiny_args

    path = write_jsonl(
        tmp_path / "a.jsonl", [{"text": "the king and", "pronoun": "he", "wrong": "it", "person": "king"}]
    )
    assert run_cli(train.main, tiny_args(tmp_path, f"--agreement={path}")) == 0
    assert "pronoun agreement on 1 single-person contexts" in capsys.readouterr().out
    events = EventAccumulator(str(tmp_path / "runs" / "t")).Reload()
    assert [e.step for e in events.Scalars("probes/agreement_accuracy")] == [0, 3, 6]
    assert "probes/agreement_accuracy_without_name_readers" in events.Tags()["scalars"]


def test_the_lower_case_corpus_brings_its_own_lower_case_probes():
    from data.corpora import CORPORA, corpus_of

    corpus_lower = corpus_of("tinystories_lower")
    assert corpus_lower is CORPORA["tinystories_lower"]
    assert corpus_of("../shared/data/tinystories_lower.txt") is corpus_lower  # its file, by name
    assert corpus_of("my_stories.txt") is None
    probes = load_jsonl(corpus_lower.probes_path, Probe)
    agreement = load_jsonl(corpus_lower.agreement_path, AgreementProbe)
    assert all(p.text == p.text.lower() for p in probes) and all(a.text == a.text.lower() for a in agreement)
    assert {a.mention for a in agreement} == {"first", "second"}
