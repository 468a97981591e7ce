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
    found = json.loads(capsys.readouterr().out)
    heads = found["heads"]
    assert heads[best]["type"] == "pronoun" and heads[best]["pronoun"] >= 3 * heads[best]["untrained"]["pronoun"]
    # The paths the report prints are in the JSON too: the pronoun head's output goes on into the first MLP.
    assert any(path["sender"] == best and path["receiver"] == "MLP0" for path in found["paths"]), found["paths"]
    assert run_cli(sample.main, [f"--out_dir={demo / 'out'}", "--heads"]) == 0
    out = capsys.readouterr().out
    assert f"pronoun heads: {best} " in out and "how to read it:" in out


def test_the_watch_follows_the_pronoun_heads_output_into_the_first_mlp(demo):
    """A pass reads the paths from the heads whose output carries the answer into the inputs that carry it (queries,
    keys, values, MLPs: their own patching's figures, read first in the same pass), and finds every path that reading
    every head's into every input finds: here the pronoun head's output goes on through MLP0."""
    import torch

    from formats import load_model
    from watch.inspect import checkpoint_sets
    from watch.measure.patching import PAIRS, runs
    from watch.measure.paths import path_patching
    from watch.measure.reading import read_pass

    loaded = load_model(demo / "out" / "ckpt.pt", torch.device("cpu"))
    model = loaded.model.eval()
    sets = checkpoint_sets(model, loaded.tokenizer, loaded.checkpoint, None)
    watched = {path.name: path for path in read_pass(model, sets, kinds=(PAIRS, "paths")).results.paths}
    every = path_patching(model, runs(model, sets.get(PAIRS).items))
    assert len(watched) < len(every)
    clear = [path for path in every if path.clear]
    assert any(path.receiver == "MLP0" for path in clear), clear
    for path in clear:
        assert watched[path.name].share == pytest.approx(path.share, abs=1e-9), path.name
