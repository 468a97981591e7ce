"""TransformerLens: `sample.py --export tl` and `to_hooked_transformer` give a HookedTransformer that
computes the same function: logits within 1e-4, every layer's `hook_pattern` within 1e-5, and the
head-type scores read from its cache within 1e-5 of gptwatch's own. Every checkpoint kind exports
(tests/random_checkpoints.py: both architectures, biases or none, char and BPE), and so do trained ones."""

from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch
from conftest import require_gpt2

from data.tokenizer import CharTokenizer
from formats import load_model
from formats.transformerlens import quiet_deprecation, to_hooked_transformer
from tests.commands import TEXT, run_sample
from tests.random_checkpoints import KINDS, make_checkpoint
from watch.measure.capture import Capture, capture_attention, capture_from_patterns
from watch.measure.probesets import REPEATED, ProbeSet, ProbeSets, held_out_text, repeated_tokens, token_pool
from watch.measure.probesets import TEXT as TEXT_SET
from watch.measure.reading import interpret, measure, tally, untrained_like

transformer_lens = pytest.importorskip(
    "transformer_lens", reason="transformer-lens is optional: pip install -r requirements-interop.txt to test this"
)
if not hasattr(transformer_lens, "HookedTransformer"):
    pytest.skip(
        "this transformer-lens has no HookedTransformer (4.0 removed it); pip install -r requirements-interop.txt",
        allow_module_level=True,
    )

LOGITS_TOL, PATTERN_TOL, SCORE_TOL = 1e-4, 1e-5, 1e-5
SOURCES = [*KINDS, "trained-char", "trained-bpe"]


@pytest.fixture
def checkpoint(request, tmp_path):
    """The folder of the checkpoint a test's `source` names: made (tests/random_checkpoints.py) or trained
    (conftest)."""
    source = request.param
    if source in KINDS:
        if KINDS[source][1] == "gpt2":
            require_gpt2()
        return make_checkpoint(tmp_path / source, source)
    trained = request.getfixturevalue("trained")  # only when asked: it trains two tiny runs once per session
    return trained.copy_to(tmp_path / source, "char" if source == "trained-char" else "gpt2").parent


def token_batches(vocab_size: int, block_size: int) -> list[torch.Tensor]:
    """Random token batches, seeded: a full block, a short one, a single token."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(vocab_size, shape, generator=g) for shape in ((3, block_size), (2, 7), (1, 1))]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def compare(model, hooked) -> tuple[float, float]:
    """(max |logits diff|, max |pattern diff|) over `token_batches`: logits of both of gptwatch's paths,
    patterns as gptwatch's watching captures them (`capture_attention`) against `hook_pattern`."""
    logits_diff = pattern_diff = 0.0
    with torch.no_grad():
        for idx in token_batches(model.config.vocab_size, model.config.block_size):
            ours, _ = model.forward_with_attention(idx)
            fast, _ = model(idx, all_logits=True)
            theirs, cache = hooked.run_with_cache(idx)
            logits_diff = max(logits_diff, max_diff(ours, theirs), max_diff(fast, theirs))
            for row, layers in enumerate(capture_attention(model, idx.tolist())):
                for layer, pattern in enumerate(layers):
                    hooked_pattern = cache[f"blocks.{layer}.attn.hook_pattern"][row]
                    pattern_diff = max(pattern_diff, max_diff(pattern, hooked_pattern))
    return logits_diff, pattern_diff


@pytest.mark.parametrize("checkpoint", SOURCES, indirect=True)
def test_the_exported_file_loads_in_transformer_lens_and_computes_the_same(checkpoint, tmp_path):
    path = tmp_path / "model.tl.pt"
    code, out, err = run_sample([f"--out_dir={checkpoint}", "--export", "tl", str(path)])
    assert code == 0, err
    assert f"wrote {path}" in out and "max |logit difference|" in out
    # The README's lines:
    saved = torch.load(path)
    with quiet_deprecation():  # 3.x points to 4.x's TransformerBridge; 3.x is pinned on purpose
        hooked = transformer_lens.HookedTransformer(saved["config"])
    hooked.load_state_dict(saved["state_dict"])

    model = load_model(checkpoint, torch.device("cpu")).model
    logits_diff, pattern_diff = compare(model, hooked)
    assert logits_diff < LOGITS_TOL and pattern_diff < PATTERN_TOL, (logits_diff, pattern_diff)
    assert saved["tokenizer"] == load_model(checkpoint, torch.device("cpu")).tokenizer.to_meta()


def tl_captures(hooked, sets: ProbeSets, batch: int = 16) -> Iterator[Capture]:
    """Captures of each probe set built from TransformerLens's cache (hook_pattern, logits), not gptwatch's: `batch`
    sequences at a time (whole groups of the set), one run_with_cache per sequence length among them. `read` adds
    the captures up, as it adds up gptwatch's own few-sequence captures, so the logits of a large vocabulary at
    every position are held for a few sequences at a time (GPT-2's 50,257 for 256 windows of 64 tokens: 3.3 GB)."""
    for probe_set in sets.sets.values():
        step = max(probe_set.group, batch // probe_set.group * probe_set.group)
        for start in range(0, len(probe_set), step):
            rows = slice(start, start + step)
            at = probe_set.logits_at[rows] if probe_set.logits_at is not None else None
            part = replace(probe_set, ids=probe_set.ids[rows], items=probe_set.items[rows], logits_at=at, constants={})
            yield _tl_capture(hooked, part)


def _tl_capture(hooked, probe_set: ProbeSet) -> Capture:
    patterns, logits = [None] * len(probe_set), [None] * len(probe_set)
    for length in {len(ids) for ids in probe_set.ids}:
        rows = [i for i, ids in enumerate(probe_set.ids) if len(ids) == length]
        with torch.no_grad():
            batch_logits, cache = hooked.run_with_cache(
                torch.tensor([probe_set.ids[i] for i in rows]),
                names_filter=lambda name: name.endswith("hook_pattern"),
            )
        for n, row in enumerate(rows):
            patterns[row] = [cache[f"blocks.{layer}.attn.hook_pattern"][n] for layer in range(hooked.cfg.n_layers)]
            # Every position's, or those of the one position a set reads (a context's last, say).
            one = probe_set.logits_at is not None and not probe_set.all_logits
            logits[row] = batch_logits[n, probe_set.logits_at[row] or 0] if one else batch_logits[n]
    return capture_from_patterns(probe_set, patterns, logits)


@pytest.mark.parametrize(
    "checkpoint", ["gpt2-char", "trained-char", "trained-bpe", "modern-bias", "gpt2-attn-only"], indirect=True
)
def test_head_type_scores_from_transformer_lens_patterns_equal_gptwatch(checkpoint):
    loaded = load_model(checkpoint, torch.device("cpu"))
    model, tokenizer = loaded.model, loaded.tokenizer
    block = model.config.block_size
    sets = ProbeSets()
    sets.add(REPEATED, repeated_tokens(token_pool(None, tokenizer), block))
    sets.add(TEXT_SET, held_out_text(tokenizer.encode(TEXT), block))
    assert set(sets.sets) == {REPEATED, TEXT_SET}, sets.missing

    ours = measure(model, sets)
    theirs = tally(tl_captures(to_hooked_transformer(model), sets), sets)
    assert set(theirs.heads) == set(ours.heads) and len(ours.heads) >= 10
    for name, values in ours.heads.items():
        assert torch.equal(values.isnan(), theirs.heads[name].isnan()), name
        assert max_diff(values.nan_to_num(), theirs.heads[name].nan_to_num()) < SCORE_TOL, name
    assert set(theirs.numbers) == set(ours.numbers)
    for name, value in ours.numbers.items():
        assert abs(value - theirs.numbers[name]) < LOGITS_TOL, name
    untrained = interpret(measure(untrained_like(model, 0), sets))
    assert interpret(theirs, untrained).types == interpret(ours, untrained).types


def test_the_python_entry_point_runs_on_the_model_device_and_keeps_the_tokenizer_ids(tmp_path):
    loaded = load_model(make_checkpoint(tmp_path, "gpt2-char"), torch.device("cpu"))
    hooked = to_hooked_transformer(loaded.model)
    assert hooked.cfg.device == "cpu" and hooked.tokenizer is None and not hooked.cfg.default_prepend_bos
    assert isinstance(loaded.tokenizer, CharTokenizer)
    ids = torch.tensor([loaded.tokenizer.encode("the dog saw the ball")])
    with torch.no_grad():
        assert max_diff(hooked(ids), loaded.model(ids, all_logits=True)[0]) < LOGITS_TOL


def test_an_earlier_export_is_replaced_and_a_foreign_file_is_not(tmp_path):
    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    path = tmp_path / "model.tl.pt"
    for _ in range(2):  # the second replaces the first
        code, _, err = run_sample([f"--out_dir={folder}", "--export", "tl", str(path)])
        assert code == 0, err
    code, _, err = run_sample([f"--out_dir={folder}", "--export", "tl", str(folder / "ckpt.pt")])
    assert code == 1 and "is not an --export tl file written earlier" in err
