"""Path patching (watch/measure/paths.py): which head feeds which, equal to the same paths built with
TransformerLens's own hooks, and what it finds on the trained induction demo."""

import pytest
import torch

from tests.test_patching import a_pair, random_model
from watch.measure import paths as paths_module
from watch.measure.patching import runs
from watch.measure.paths import path_patching, receivers

TL_TOL = 1e-4


def transformer_lens_paths(hooked, pair) -> dict[str, float]:
    """The same paths with TransformerLens's hooks on the exported model: its q/k/v inputs split per head
    (`use_split_qkv_input`) and the MLPs' own input (`use_hook_mlp_in`), step 1 and step 2 as Wang et al. build
    them, the share normalised as activation patching's."""
    hooked.set_use_split_qkv_input(True)
    hooked.set_use_hook_mlp_in(True)
    clean, corrupted = torch.tensor([pair.clean]), torch.tensor([pair.corrupted])
    with torch.no_grad():
        clean_logits, clean_cache = hooked.run_with_cache(clean)
        corrupted_logits, corrupted_cache = hooked.run_with_cache(corrupted)

    def share(logits) -> float:
        diff = lambda found: float(found[0, -1, pair.answer] - found[0, -1, pair.wrong])  # noqa: E731
        return (diff(logits) - diff(corrupted_logits)) / (diff(clean_logits) - diff(corrupted_logits))

    n_layer, n_head = hooked.cfg.n_layers, hooked.cfg.n_heads
    found = {}
    for layer in range(n_layer):
        for head in range(n_head):
            sender = f"L{layer}H{head}"
            frozen = tl_step_one(hooked, corrupted, clean_cache, corrupted_cache, layer, head)
            for later in range(layer + 1, n_layer):
                for receiver in range(n_head):
                    for kind in "qkv":
                        name = f"blocks.{later}.hook_{kind}_input"
                        logits = tl_step_two(hooked, corrupted, name, frozen[name], receiver)
                        found[f"{sender}->L{later}H{receiver} {kind}"] = share(logits)
            for mlp in range(layer, n_layer):
                name = f"blocks.{mlp}.hook_mlp_in"
                found[f"{sender}->MLP{mlp} mlp"] = share(tl_step_two(hooked, corrupted, name, frozen[name], None))
            # The sender's clean output added alone to the corrupted run's final stream.
            z = f"blocks.{layer}.attn.hook_z"
            change = clean_cache[z][0, -1, head] - corrupted_cache[z][0, -1, head]
            final = corrupted_cache[f"blocks.{n_layer - 1}.hook_resid_post"][:, -1:] + change @ hooked.W_O[layer, head]
            with torch.no_grad():
                found[f"{sender}->logits logits"] = share(hooked.unembed(hooked.ln_final(final)))
    return found


def tl_step_one(hooked, corrupted, clean_cache, corrupted_cache, layer: int, head: int):
    """Step 1: the corrupted prompt with every head at its corrupted output but the sender at its clean one; the
    receivers' inputs it leaves."""

    def freeze(z, hook):
        z = corrupted_cache[hook.name].clone()
        if hook.layer() == layer:
            z[:, :, head] = clean_cache[hook.name][:, :, head]
        return z

    n_layer = hooked.cfg.n_layers
    inputs = [f"blocks.{n}.hook_{kind}_input" for n in range(n_layer) for kind in "qkv"]
    inputs += [f"blocks.{n}.hook_mlp_in" for n in range(n_layer)]
    with torch.no_grad(), hooked.hooks(fwd_hooks=[(f"blocks.{n}.attn.hook_z", freeze) for n in range(n_layer)]):
        return hooked.run_with_cache(corrupted, names_filter=lambda name: name in inputs)[1]


def tl_step_two(hooked, corrupted, name: str, value, receiver: int | None):
    """Step 2: the corrupted prompt with one receiver's input (`receiver`'s slice of `name`, or all of an MLP's) taken
    from step 1."""

    def take(x, hook):
        x = x.clone()
        if receiver is None:
            return value
        x[:, :, receiver] = value[:, :, receiver]
        return x

    with torch.no_grad():
        return hooked.run_with_hooks(corrupted, fwd_hooks=[(name, take)])


@pytest.mark.parametrize("sizes", [{"bias": True}, {"n_layer": 3, "n_head": 2}])
def test_path_patching_equals_transformer_lens_hooks_on_the_exported_model(sizes):
    transformer_lens = pytest.importorskip(
        "transformer_lens", reason="transformer-lens is optional: pip install -r requirements-interop.txt to test this"
    )
    if not hasattr(transformer_lens, "HookedTransformer"):
        pytest.skip(
            "this transformer-lens has no HookedTransformer (4.0 removed it); pip install -r requirements-interop.txt"
        )
    from formats.transformerlens import to_hooked_transformer

    model, tokenizer = random_model(seed=1, n_embd=32, **sizes)
    pair = a_pair(model, tokenizer, "the dog saw he", "the dog saw it")
    ours = {path.name: path.share for path in path_patching(model, runs(model, [pair]))}
    theirs = transformer_lens_paths(to_hooked_transformer(model), pair)
    assert set(ours) == set(theirs)
    worst = max(abs(ours[name] - theirs[name]) for name in ours)
    assert worst < TL_TOL, worst


def test_every_later_head_input_and_every_mlp_from_the_senders_layer_on_receives():
    model, _ = random_model(n_layer=3, n_head=2)
    assert [r[:2] for r in receivers(model, 1)] == [
        ("L2H0", "q"),
        ("L2H0", "k"),
        ("L2H0", "v"),
        ("L2H1", "q"),
        ("L2H1", "k"),
        ("L2H1", "v"),
        ("MLP1", "mlp"),
        ("MLP2", "mlp"),
    ]
    attention_only, _ = random_model(n_layer=2, n_head=2, attn_only=True)
    assert [r[:2] for r in receivers(attention_only, 1)] == []  # the last layer's heads feed the logits alone


def test_the_paths_give_the_same_figures_however_many_share_a_forward(monkeypatch):
    from watch.measure import patching

    model, tokenizer = random_model()
    pair = a_pair(model, tokenizer)
    whole = path_patching(model, runs(model, [pair]))
    monkeypatch.setattr(patching, "PATCHED_ROWS", 5)
    for one, other in zip(whole, path_patching(model, runs(model, [pair])), strict=True):
        assert one.name == other.name and abs(one.share - other.share) < 1e-6


def test_a_path_through_nothing_the_pair_changes_brings_nothing_back():
    """In an attention-only model, a layer-0 head's output reaches a layer-1 head only through that head's inputs: its
    three paths and its direct path add up to what patching its output brings back when no other head sits between."""
    model, tokenizer = random_model(n_layer=1, attn_only=True)
    pair = a_pair(model, tokenizer)
    found = path_patching(model, runs(model, [pair]))
    assert {path.receiver for path in found} == {"logits"}  # one layer, no MLP: the logits alone
    from watch.measure.patching import analyse

    heads = analyse(model, pair).shares["heads"][0]
    # One layer: the sender's output reaches the logits only directly, so its path is its whole patched output.
    assert max(abs(path.share - float(heads[int(path.sender[-1])])) for path in found) < 1e-5
    assert paths_module.INPUTS == ("q", "k", "v")


# --- what it shows on the trained induction demo ------------------------------------------------------------------


def test_on_the_induction_demo_the_previous_token_head_feeds_each_induction_heads_keys():
    """On pairs whose corrupted prompt has another token before the answer (the answer stays, only where to find it
    changes), the strongest path into each induction head is the previous-token head's output through its keys, and
    patching an induction head's keys brings back more than its values or its queries: K-composition, measured."""
    from test_draws import induction_demo

    from watch.measure import patching
    from watch.measure.probesets import token_pool

    model, tokenizer = induction_demo()
    pairs = patching.repeat_pairs(token_pool(None, tokenizer, "induction").tokens, model.config.block_size)
    found = path_patching(model, runs(model, pairs.items))
    previous_token = "L0H1"  # the demo's previous-token head (tests/test_draws.py reads its types)
    for receiver in ("L1H0", "L1H1"):  # its two induction heads
        into = [path for path in found if path.receiver == receiver]
        strongest = max(into, key=lambda path: path.share)
        assert (strongest.sender, strongest.input) == (previous_token, "k") and strongest.clear, strongest
    shares = patching.watched(model, pairs.items)
    keys, values, queries = (shares[f"patching_{part}"][1] for part in ("keys", "values", "queries"))
    assert (keys > values).all() and (keys > queries.abs()).all()


# --- the watch: a graph and the paths at every pass ------------------------------------------------------------


def test_every_pass_logs_the_circuit_and_each_paths_share_in_its_senders_run(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from test_draws import induction_demo

    from watch.measure.paths import PATHS
    from watch.measure.reading import Materials, read_pass, watch_sets
    from watch.show.tensorboard import TensorBoardWriter, chart_layout, log_scores

    model, tokenizer = induction_demo()
    materials = dict(train_tokens=None, corpus="induction")
    sets = watch_sets(Materials(tokenizer, model.config.block_size, **materials))
    assert sets.get(PATHS).items == sets.get("pairs").items  # the pairs patching reads, read again for the paths
    assert "the token before the answer changed" in sets.get(PATHS).about
    reading = read_pass(model, sets, kinds=("pairs", PATHS))
    writer = TensorBoardWriter(tmp_path)
    for step in (25, 50):
        log_scores(writer, step, reading)
    writer.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "scalars": 0}).Reload()
    assert [image.step for image in events.Images("paths/circuit")] == [25, 50]  # an image series: a slider
    assert events.Scalars("paths/strongest")[0].value == pytest.approx(max(p.share for p in reading.results.paths))
    sender = EventAccumulator(str(tmp_path / "L0H1")).Reload()
    k_into = {path.receiver: path.share for path in reading.results.paths if path.input == "k"}
    assert sender.Scalars("paths/k/into_L1H0/L0")[0].value == pytest.approx(k_into["L1H0"])
    # The category says what its charts were measured on: the pairs.
    charts = chart_layout(sets, 2, 2)[f"patching, over {sets.get(PATHS).about}"]
    assert "path through the keys of L1H0" in charts and "path straight to the logits, from layer 0" in charts
    # A run told to leave the paths out patches the same pairs and reads no path.
    plain = watch_sets(Materials(tokenizer, model.config.block_size, **materials, paths=False))
    assert PATHS not in plain.sets and plain.get("pairs").items == sets.get("pairs").items
    assert (
        "path through the keys of L1H0" not in chart_layout(plain, 2, 2)[f"patching, over {plain.get('pairs').about}"]
    )


# --- sample.py --patch --paths ----------------------------------------------------------------------------------


def test_sample_patch_paths_prints_the_paths_draws_the_graph_and_gives_them_in_the_json(tmp_path):
    import json

    from tests.commands import run_sample
    from tests.random_checkpoints import make_checkpoint

    folder = make_checkpoint(tmp_path / "ckpt", "gpt2-char")
    prompts = ["--patch", "the dog saw it", "the log saw it", "--answer", "a", "--wrong", "e", "--paths"]
    code, out, err = run_sample([f"--out_dir={folder}", *prompts, "--json"])
    assert code == 0, err
    found = json.loads(out)["paths"]
    assert {tuple(sorted(path)) for path in found} == {("input", "receiver", "sender", "share", "spread")}
    assert {path["input"] for path in found} == {"q", "k", "v", "mlp", "logits"}
    assert len(found) == 4 * (4 * 3 + 2 + 1) + 4 * (1 + 1)  # layer-0 senders: 4 heads x q/k/v, 2 MLPs, the logits
    code, out, err = run_sample([f"--out_dir={folder}", *prompts, f"--png_dir={tmp_path / 'maps'}"])
    assert code == 0, err
    assert "which head feeds which (path patching over the pair: " in out and "the strongest paths: " in out
    assert len(list((tmp_path / "maps").glob("*_paths.png"))) == 1
