"""A model trained elsewhere in sample.py: `--init_from=SOURCE` names it instead of `--out_dir`, and every mode
works on it as on a checkpoint train.py wrote: plain sampling (the padding rows of nanoGPT's vocabulary never
sampled), `--heads` (against a randomly initialised model of the same config; the text types on `--text`),
`--attention` (PNGs under out/KIND-NAME/attention, or a page), `--probes` and `--export`. The models are made here
with random weights by their own code (tests/test_import.py): a Hugging Face GPT-2 folder and nanoGPT checkpoints.

Its head-type scores are TransformerLens's, read from `run_with_cache` on the model `--export tl` wrote, within
1e-5; and a gptwatch model carried out with `--export hf` and back in with `--init_from` computes the same
function, with the same parameters and zeros for the biases it had not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import require_gpt2
from test_import import SHAKESPEARE_CHARS, hf_model, nanogpt, nanogpt_model, needs, save_hf, save_meta, save_nanogpt

from data.tokenizer import CharTokenizer
from formats import load_model
from formats.sources import describe, identify
from tests.commands import TEXT, one_line, run_sample
from tests.random_checkpoints import make_checkpoint
from watch.inspect import checkpoint_sets
from watch.measure.reading import tally
from watch.show.heatmaps import sentence_slug

__all__ = ["nanogpt"]  # the fixture, shared with tests/test_import.py

CPU = torch.device("cpu")
GPT2_VOCAB = 50257
SCORE_TOL, SAME_FUNCTION_TOL = 1e-5, 1e-5
KINDS = ("previous_token", "duplicate_token", "induction", "sink", "current_token", "broad")
SOURCES = ("hf", "nanogpt-char")
PROBE = {"text": "the cat and the dog saw it", "pronoun": "it", "referent": "cat", "distractor": "dog"}


def make_source(which: str, root: Path, nanogpt_module) -> Path:
    """A model trained elsewhere, saved where a user would have it: a save_pretrained folder, or nanoGPT's
    out_dir with its meta.pkl where nanoGPT's sample.py finds it (data/<dataset>/ beside out-...)."""
    if which == "hf":
        require_gpt2()
        return save_hf(hf_model(), root / "tiny-gpt2")
    model, args = nanogpt_model(nanogpt_module, block_size=64)
    path = save_nanogpt(model, args, root / "out-shakespeare-char")
    save_meta(root / "data" / "shakespeare_char" / "meta.pkl", SHAKESPEARE_CHARS)
    return path.parent


@pytest.fixture(params=SOURCES)
def source(request, tmp_path, monkeypatch, nanogpt) -> Path:
    """The model's folder; the working folder is tmp_path, where out/KIND-NAME/ goes."""
    monkeypatch.chdir(tmp_path)
    return make_source(request.param, tmp_path, nanogpt)


def text_file(root: Path) -> Path:
    path = root / "my.txt"
    path.write_text("".join(c for c in TEXT if not c.isdigit()))  # characters every source knows
    return path


def sample(*args: str) -> tuple[str, str]:
    """stdout and stderr of a sample.py command that succeeds; stderr says what the model is, in one line."""
    code, out, err = run_sample(list(args))
    assert code == 0, err
    return out, err


# --- every mode ------------------------------------------------------------------------------------------------


def test_plain_sampling_streams_what_the_models_own_generate_gives(source):
    loaded = load_model(identify(source), CPU)
    out, err = sample(
        f"--init_from={source}", "--prompt=the dog", "--temperature=0", "--max_new_tokens=12", "--device=cpu"
    )
    assert err == describe(loaded) + "\n"
    ids = loaded.tokenizer.encode("the dog")
    expected = loaded.model.generate(torch.tensor([ids]), 12, temperature=0)[0].tolist()
    assert out == loaded.tokenizer.decode(expected) + "\n"


def test_heads_without_text_measures_what_repeated_tokens_give_and_says_to_give_text(source):
    out, _ = sample(f"--init_from={source}", "--heads")
    # Each column named beside the set it is read from.
    assert out.startswith(f"head types of {source} (duplicate, induction: 128 sequences of 32 random tokens repeated")
    assert "(no held-out text: a model trained elsewhere brings no val split; give --text FILE" in out
    report = json.loads(sample(f"--init_from={source}", "--heads", "--json")[0])
    heads = report["heads"]
    config = load_model(identify(source), CPU).model.config
    assert len(heads) == config.n_layer * config.n_head
    for scores in heads.values():
        assert scores["induction"] is not None and scores["duplicate_token"] is not None
        assert scores["previous_token"] is None and scores["untrained"]["induction"] is not None
    assert set(report["not_measured"]) == {"text"}


def test_heads_on_the_users_text_with_a_head_removed(source, tmp_path):
    text = text_file(tmp_path)
    out, _ = sample(f"--init_from={source}", "--heads", f"--text={text}", "--ablate=L0H1", "--ablation=mean")
    assert "windows of" in out and str(text) in out and "with L0H1 removed (mean-ablation)" in out
    report = json.loads(sample(f"--init_from={source}", "--heads", f"--text={text}", "--json")[0])
    assert all(report["heads"][name]["previous_token"] is not None for name in report["heads"])
    assert report["not_measured"] == {}


def test_attention_heatmaps_go_under_out_and_its_name(source, tmp_path):
    out, _ = sample(f"--init_from={source}", "--attention=the dog saw it")
    kind = "nanogpt" if (source / "ckpt.pt").exists() else "huggingface"  # named for what it is, never its own folder
    folder = Path("out") / f"{kind}-{source.name}" / "attention"
    assert f"heatmaps: {folder}/{sentence_slug('the dog saw it')}_*.png" in out
    assert sorted(p.name for p in (tmp_path / folder).iterdir())[0].startswith("the_dog_saw_it_")
    page = tmp_path / "page.html"
    out, _ = sample(f"--init_from={source}", "--attention=the dog saw it", f"--html={page}")
    assert f"attention page: {page}" in out and page.stat().st_size > 0
    report = json.loads(sample(f"--init_from={source}", "--attention=the dog saw it", "--json")[0])
    assert report["query_pos"] == len(report["tokens"]) - 1


def test_probes_and_exports(source, tmp_path):
    needs("transformer_lens")
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps(PROBE) + "\n")
    report = json.loads(sample(f"--init_from={source}", f"--probes={probes}", "--json")[0])
    assert report["n_probes"] == 1
    for target, path in (("tl", tmp_path / "m.tl.pt"), ("hf", tmp_path / "m-hf")):
        out, _ = sample(f"--init_from={source}", "--export", target, str(path))
        assert f"wrote {path}" in out and path.exists()


def test_the_padding_rows_of_nanogpts_vocabulary_are_never_sampled(nanogpt, tmp_path):
    """GPT-2's BPE in nanoGPT's 50,304 rows, the 47 padding rows made by far the most likely after every token (the
    final norm's output is mostly one direction, and they point along it): sampled and greedy text is still GPT-2's
    tokens."""
    require_gpt2()
    model, args = nanogpt_model(nanogpt, vocab_size=50304, n_embd=32)
    direction = torch.nn.functional.normalize(torch.randn(32), dim=0)
    with torch.no_grad():
        model.transformer.ln_f.weight.fill_(0.1)
        model.transformer.ln_f.bias.copy_(5 * direction)
        model.transformer.wte.weight[GPT2_VOCAB:] = 5 * direction
    path = save_nanogpt(model, args, tmp_path / "out-owt", dataset="openwebtext")
    loaded = load_model(path, CPU)
    with torch.no_grad():
        logits = loaded.model(torch.randint(GPT2_VOCAB, (4, 9)), all_logits=True)[0]
    assert bool((logits.argmax(-1) >= GPT2_VOCAB).all())  # unmasked, the padding would always win
    for temperature in ("0", "1.0"):
        out, _ = sample(
            f"--init_from={path}",
            "--prompt=Hello",
            f"--temperature={temperature}",
            "--max_new_tokens=20",
            "--device=cpu",
        )
        ids = loaded.tokenizer.encode(out.removesuffix("\n"))
        assert len(ids) > 1 and max(ids) < GPT2_VOCAB


def test_a_gptwatch_checkpoint_named_by_init_from_is_read_as_out_dir_reads_it(tmp_path):
    folder = make_checkpoint(tmp_path / "out", "gpt2-char")
    for args in (["--temperature=0", "--max_new_tokens=20"], ["--heads"]):
        by_out_dir = run_sample([f"--out_dir={folder}", *args])
        assert by_out_dir[0] == 0 and run_sample([f"--init_from={folder}", *args]) == by_out_dir


def test_both_out_dir_and_init_from_is_one_usage_line(tmp_path):
    code, _, err = run_sample([f"--out_dir={tmp_path}", "--init_from=gpt2"])
    assert code == 2 and "--out_dir and --init_from both name the model" in one_line(err)


# --- the same scores as TransformerLens ------------------------------------------------------------------------


@pytest.mark.parametrize("which", SOURCES)
def test_head_type_scores_equal_transformer_lens_on_the_exported_model(which, tmp_path, monkeypatch, nanogpt):
    """`--heads --json --text` of the imported model against TransformerLens: its HookedTransformer as `--export tl`
    wrote it, the patterns and logits of `run_with_cache` on the same probe sets, read by the same scores."""
    transformer_lens = needs("transformer_lens")
    from test_interop_tl import tl_captures

    from formats.transformerlens import quiet_deprecation

    monkeypatch.chdir(tmp_path)
    source, text = make_source(which, tmp_path, nanogpt), text_file(tmp_path)
    report = json.loads(sample(f"--init_from={source}", "--heads", f"--text={text}", "--json")[0])
    sample(f"--init_from={source}", "--export", "tl", "m.tl.pt")
    saved = torch.load("m.tl.pt")
    with quiet_deprecation():
        hooked = transformer_lens.HookedTransformer(saved["config"])
    hooked.load_state_dict(saved["state_dict"])

    loaded = load_model(identify(source), CPU)
    sets = checkpoint_sets(loaded.model, loaded.tokenizer, loaded.checkpoint, str(text))
    theirs = tally(tl_captures(hooked, sets), sets)
    compared = 0
    for name, ours in report["heads"].items():
        layer, head = (int(n) for n in name[1:].split("H"))
        for kind in KINDS:
            expected = theirs.head(kind, layer, head)
            assert (ours[kind] is None) == (expected is None), (name, kind)
            if expected is not None:
                assert abs(ours[kind] - expected) < SCORE_TOL, (name, kind, ours[kind], expected)
                compared += 1
    assert compared == len(report["heads"]) * len(KINDS)


# --- out with --export hf, back in with --init_from --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gpt2-char", "gpt2-bpe"])
def test_an_hf_export_read_back_computes_the_same_function(kind, tmp_path):
    """A gptwatch model of the gpt2 architecture (without biases; with biases but none in query/key/value)."""
    needs("transformers")
    if kind == "gpt2-bpe":
        require_gpt2()
    folder = make_checkpoint(tmp_path / "out", kind)
    sample(f"--out_dir={folder}", "--export", "hf", str(tmp_path / "hf"))
    ours = load_model(folder, CPU)
    back = load_model(identify(tmp_path / "hf"), CPU)
    assert back.tokenizer.to_meta() == ours.tokenizer.to_meta()
    state, state_back = ours.model.state_dict(), back.model.state_dict()
    for name, value in state_back.items():
        if name in state:
            assert torch.equal(value, state[name]), name
        else:
            assert not value.any(), f"{name}, which the gptwatch model had not, is not zero"
    assert set(state) <= set(state_back) and len(state_back) > len(state)
    idx = torch.randint(ours.model.config.vocab_size, (3, ours.model.config.block_size))
    with torch.no_grad():
        diff = (back.model(idx, all_logits=True)[0] - ours.model(idx, all_logits=True)[0]).abs().max()
    assert float(diff) < SAME_FUNCTION_TOL
    greedy = ["--prompt=the dog", "--temperature=0", "--max_new_tokens=20", "--device=cpu"]
    assert sample(f"--init_from={tmp_path / 'hf'}", *greedy)[0] == sample(f"--out_dir={folder}", *greedy)[0]
    assert isinstance(back.tokenizer, CharTokenizer) == (kind == "gpt2-char")
