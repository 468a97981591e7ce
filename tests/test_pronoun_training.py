"""A short seeded training run on the pronoun corpus learns a head that resolves pronouns."""

import json

import pytest
from conftest import require_gpt2

import train
from common.cli import run_cli


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The subject of these tests: the demo's own config, trained (not a checkpoint to borrow: that is
    conftest's `trained`)."""
    require_gpt2()
    tmp = tmp_path_factory.mktemp("pronouns")
    # The demo as configs/pronouns.toml trains it (its steps, rate and seed), evaluated once at the end.
    args = [
        "configs/pronouns.toml",
        f"--data_dir={tmp / 'prep'}",
        f"--out_dir={tmp / 'out'}",
        f"--log_dir={tmp / 'runs'}",
        "--run_name=p",
        "--eval_interval=10000",
        "--eval_iters=2",
        "--sample_tokens=0",
    ]
    assert run_cli(train.main, args) == 0
    return tmp


def test_best_head_beats_the_positional_heuristics(demo, capsys):
    import sample

    probes = next((demo / "prep").glob("pronouns-*/probes.jsonl"))
    assert run_cli(sample.main, [f"--out_dir={demo / 'out'}", f"--probes={probes}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baselines"]["first_noun"] == pytest.approx(0.5)
    assert report["baselines"]["nearest_noun"] == pytest.approx(0.5)
    best = report["best"]
    assert best["top1"] >= 0.8, best  # "first noun" and "nearest noun" both sit at 50%
    assert best["referent"] > 2 * best["distractor"]


def test_ablating_the_best_head_hurts_the_continuation(demo, capsys):
    import sample

    probes = next((demo / "prep").glob("pronouns-*/probes.jsonl"))
    run_cli(sample.main, [f"--out_dir={demo / 'out'}", f"--probes={probes}", "--json"])
    report = json.loads(capsys.readouterr().out)
    run_cli(
        sample.main, [f"--out_dir={demo / 'out'}", f"--probes={probes}", "--json", f"--ablate={report['best']['name']}"]
    )
    ablated = json.loads(capsys.readouterr().out)
    assert ablated["continuation_accuracy"] < report["continuation_accuracy"]
    assert ablated["continuation_accuracy_without_ablation"] == pytest.approx(report["continuation_accuracy"])


def test_the_head_table_names_the_pronoun_head(demo, capsys):
    """`sample.py --heads` on the demo finds the pronoun probes of its corpus and types its best head."""
    import sample

    probes = next((demo / "prep").glob("pronouns-*/probes.jsonl"))
    run_cli(sample.main, [f"--out_dir={demo / 'out'}", f"--probes={probes}", "--json"])
    best = json.loads(capsys.readouterr().out)["best"]["name"]
    assert run_cli(sample.main, [f"--out_dir={demo / 'out'}", "--heads", "--json"]) == 0
    heads = json.loads(capsys.readouterr().out)["heads"]
    assert heads[best]["type"] == "pronoun" and heads[best]["pronoun"] >= 3 * heads[best]["untrained"]["pronoun"]
    assert run_cli(sample.main, [f"--out_dir={demo / 'out'}", "--heads"]) == 0
    out = capsys.readouterr().out
    assert f"pronoun heads: {best} " in out and "how to read it:" in out
