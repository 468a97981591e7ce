"""Hugging Face: `sample.py --export hf FOLDER` writes a folder that transformers loads offline with
`AutoModelForCausalLM` / `AutoTokenizer` (no trust_remote_code): the same logits within 1e-4, the
tokenizer's ids are gptwatch's, and greedy generation with transformers' KV cache gives the tokens
`sample.py --temperature=0` gives, for as many new tokens as the block holds. A modern model with
biases has no exact standard class: the export is refused in one line, and nothing is written."""

import json

import pytest
import torch
from conftest import require_gpt2, shared_file

from data.tokenizer import EOT, TokenizerError
from formats import load_model
from formats.huggingface import MARKER
from tests.commands import TEXT, one_line, run_sample
from tests.random_checkpoints import KINDS, make_checkpoint

transformers = pytest.importorskip(
    "transformers", reason="transformers is optional: pip install -r requirements-interop.txt to test this"
)

LOGITS_TOL = 1e-4
CLASSES = {"gpt2": "GPT2LMHeadModel", "modern": "Qwen3ForCausalLM"}
EXPORTABLE = [kind for kind, (arch, _, bias) in KINDS.items() if not (arch == "modern" and bias)]
PROMPT = "the dog saw"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def exported(tmp_path, kind: str):
    """(checkpoint folder, Hugging Face folder) for a model of `kind`, exported by sample.py."""
    if KINDS[kind][1] == "gpt2":
        require_gpt2()
    checkpoint = make_checkpoint(tmp_path / "ckpt", kind)
    folder = tmp_path / "hf"
    code, out, err = run_sample([f"--out_dir={checkpoint}", "--export", "hf", str(folder)])
    assert code == 0, err
    assert f"wrote {folder}" in out and "AutoModelForCausalLM.from_pretrained" in out
    return checkpoint, folder


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


@pytest.mark.parametrize("kind", EXPORTABLE)
def test_the_folder_reloads_offline_with_the_same_logits(tmp_path, kind):
    checkpoint, folder = exported(tmp_path, kind)
    model = load_model(checkpoint, torch.device("cpu")).model
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(hf).__name__ == CLASSES[KINDS[kind][0]]
    assert hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for shape in ((3, model.config.block_size), (2, 7), (1, 1)):
        idx = torch.randint(model.config.vocab_size, shape, generator=g)
        with torch.no_grad():
            worst = max(worst, max_diff(model(idx, all_logits=True)[0], hf(idx).logits))
    assert worst < LOGITS_TOL, worst
    marker = json.loads((folder / MARKER).read_text())
    assert marker["class"] == CLASSES[KINDS[kind][0]] and marker["tokenizer"]["name"] == KINDS[kind][1]
    # The weights are readable like the rest of the folder (safetensors alone would write them 0600).
    modes = {path.name: path.stat().st_mode & 0o777 for path in folder.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {modes["config.json"]}, modes


@pytest.mark.parametrize("kind", ["gpt2-attn-only", "modern-attn-only"])
def test_an_attention_only_block_keeps_an_mlp_that_adds_exactly_zero(tmp_path, kind):
    from formats.huggingface import to_hf_model

    model = load_model(make_checkpoint(tmp_path, kind), torch.device("cpu")).model
    hf = to_hf_model(model)
    for block in hf.transformer.h if kind.startswith("gpt2") else hf.model.layers:
        assert all(not t.any() for t in block.mlp.parameters())
        norm = block.ln_2 if kind.startswith("gpt2") else block.post_attention_layernorm
        assert torch.equal(norm.weight, torch.ones(model.config.n_embd))
        x = torch.randn(2, 5, model.config.n_embd) * 10
        with torch.no_grad():
            assert torch.equal(block.mlp(norm(x)), torch.zeros_like(x))


def check_same_ids(ours, theirs, texts: list[str]) -> int:
    """Each text gets gptwatch's ids from the Hugging Face tokenizer, and decodes back the same; a text
    gptwatch refuses gets an id past the model's vocabulary, which the model refuses. Returns how many
    texts gptwatch could encode."""
    encoded = 0
    for text in texts:
        try:
            ids = ours.encode(text)
        except TokenizerError:
            assert max(theirs(text)["input_ids"]) >= ours.vocab_size, text
            continue
        encoded += 1
        assert theirs(text)["input_ids"] == ids, text
        assert theirs.decode(ids) == ours.decode(ids), text
    return encoded


@pytest.mark.parametrize("kind", ["gpt2-char", "gpt2-bpe"])
def test_the_folder_tokenizer_gives_gptwatch_ids(tmp_path, kind):
    checkpoint, folder = exported(tmp_path, kind)
    ours = load_model(checkpoint, torch.device("cpu")).tokenizer
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    lines = TEXT.splitlines(keepends=True)[:40]
    texts = [
        TEXT,
        *lines,
        " ",
        "\n\n",
        "the  dog   saw \n ",
        PROMPT,
        f"the dog{EOT}the cat",
        EOT,
        "THE DOG",
        "the xylophone",
        "<unk>",
        "zebra\t",
    ]
    assert check_same_ids(ours, theirs, texts) >= len(lines) + 2


def test_the_bpe_mapping_holds_on_a_real_corpus():
    """The rebuilt BPE against tiktoken's on a corpus with thousands of distinct tokens."""
    require_gpt2()
    from data.tokenizer import GPT2Tokenizer
    from formats.huggingface import hf_tokenizer

    corpus = shared_file("data/tinyshakespeare.txt").read_text(encoding="utf-8")
    ours = GPT2Tokenizer.from_text(corpus[:300_000])
    theirs = hf_tokenizer(ours)
    windows = [corpus[i : i + 1500] for i in range(0, 600_000, 3000)]  # the second half: unseen tokens too
    texts = windows + corpus[:300_000].splitlines(keepends=True)[:500] + [f"{EOT}ROMEO:{EOT}\n", "  \n\n  x"]
    assert check_same_ids(ours, theirs, texts) >= 500


@pytest.mark.parametrize("kind", EXPORTABLE)
def test_greedy_generation_with_the_kv_cache_equals_sample_py(tmp_path, kind):
    checkpoint, folder = exported(tmp_path, kind)
    loaded = load_model(checkpoint, torch.device("cpu"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    prompt = tokenizer(PROMPT, return_tensors="pt")
    new = loaded.model.config.block_size - prompt["input_ids"].shape[1]  # prompt + new fill the block
    hf.generation_config.eos_token_id = None  # sample.py does not stop at end-of-text; transformers would
    with torch.no_grad():
        theirs = hf.generate(**prompt, do_sample=False, max_new_tokens=new, use_cache=True, pad_token_id=0)
    assert theirs.shape[1] == loaded.model.config.block_size
    assert theirs[0].tolist() == loaded.model.generate(prompt["input_ids"], new, temperature=0)[0].tolist()
    code, out, err = run_sample(
        [f"--out_dir={checkpoint}", f"--prompt={PROMPT}", "--temperature=0", f"--max_new_tokens={new}", "--device=cpu"]
    )
    assert code == 0, err
    assert out == loaded.tokenizer.decode(theirs[0].tolist()) + "\n"
    assert out == tokenizer.decode(theirs[0]) + "\n"


def test_a_modern_model_with_biases_is_refused_in_one_line(tmp_path):
    require_gpt2()
    checkpoint = make_checkpoint(tmp_path / "ckpt", "modern-bias")
    code, out, err = run_sample([f"--out_dir={checkpoint}", "--export", "hf", str(tmp_path / "hf")])
    assert code == 1 and out == ""
    assert "Qwen3ForCausalLM" in one_line(err) and "(c_fc, c_proj)" in err and "(out_proj)" in err
    assert not (tmp_path / "hf").exists()


def test_an_earlier_export_is_replaced_and_nothing_else_is(tmp_path):
    checkpoint, folder = exported(tmp_path, "gpt2-char")
    code, _, err = run_sample([f"--out_dir={checkpoint}", "--export", "hf", str(folder)])
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "hf"]  # no temporary folder left
    (folder / "notes.txt").write_text("mine")
    code, _, err = run_sample([f"--out_dir={checkpoint}", "--export", "hf", str(folder)])
    assert code == 1 and "not empty and holds no earlier export" in one_line(err)
    assert (folder / "notes.txt").read_text() == "mine"
