"""Configs: TOML into a typed dataclass; every key and type checked; --key=value overrides."""

from pathlib import Path

import pytest

from errors import UsageError
from trainer.config import FIELDS, TrainConfig, help_text, load_config, parse_overrides

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_loads(path):
    assert isinstance(load_config(path, []), TrainConfig)


def test_shakespeare_char_is_nanogpts_cpu_recipe():
    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "shakespeare_char.toml", [])
    recipe = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, max_iters=2000,
                  learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, dropout=0.0, beta1=0.9, beta2=0.99,
                  weight_decay=0.1, grad_clip=1.0, eval_interval=250, eval_iters=20, tokenizer="char",
                  dataset="shakespeare", grad_accum=1, decay_iters=2000)
    assert {k: getattr(cfg, k) for k in recipe} == recipe


def test_overrides_are_typed_and_win_over_the_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("n_layer = 3\nlearning_rate = 1\n")
    cfg = load_config(f, ["--n_layer=5", "--compile", "--dropout=0.1", '--watch_sentences=["a b", "c"]'])
    assert (cfg.n_layer, cfg.compile, cfg.dropout, cfg.learning_rate) == (5, True, 0.1, 1.0)
    assert cfg.watch_sentences == ["a b", "c"]
    assert isinstance(cfg.learning_rate, float)


def test_unknown_key_names_it_and_suggests(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("n_layers = 3\n")
    with pytest.raises(UsageError, match="unknown config key 'n_layers'.*did you mean 'n_layer'"):
        load_config(f, [])
    with pytest.raises(UsageError, match="'lerning_rate'.*'learning_rate'"):
        parse_overrides(["--lerning_rate=1"])


@pytest.mark.parametrize("text,match", [
    ("n_layer = 'four'", "'n_layer' in .* must be an integer"),
    ("compile = 1", "'compile' .* must be true or false"),
    ("n_layer = 0", "'n_layer' must be a positive integer"),
    ("n_embd = 130", "must be a multiple of 'n_head'"),
    ("tokenizer = 'bpe'", "'tokenizer' must be one of char, gpt2"),
    ("n_layer = [", "not valid TOML.*line 1"),
    ("n_layer = 2\nn_head = = 3", "not valid TOML.*line 2"),
    ("[model]\nn_layer = 2", "keys are flat"),
    ("device = 'tpu'", "'device' must be one of auto, cpu, cuda, mps or cuda:N"),
    ("device = 'cuda:x'", "'device' must be one of"),
    ("device = 'cpu:'", "'device' must be one of"),
    ("device = 'cuda:'", "'device' must be one of"),
    ("device = 'cuda:²'", "'device' must be one of"),
    ('out_dir = "a\\u0000b"', "'out_dir' holds a NUL character"),
    ("dataset = ' '", "'dataset' is empty"),
    ("watch_sentences = ['the dog', '']", "non-empty strings"),
])
def test_bad_config_files_get_one_clear_error(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text + "\n")
    with pytest.raises(UsageError, match=match):
        load_config(f, [])


def test_help_lists_every_key_with_its_default():
    text = help_text("train.py", "configs/pronouns.toml")
    for name in FIELDS:
        assert f"--{name}=" in text


def test_a_byte_order_mark_is_not_part_of_the_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_bytes(b"\xef\xbb\xbf" + "n_layer = 3\r\nrun_name = 'été'\r\n".encode())
    cfg = load_config(f, [])
    assert (cfg.n_layer, cfg.run_name) == (3, "été")


def test_one_gpu_can_be_named_in_the_config():
    assert load_config(None, ["--device=cuda:1"]).device == "cuda:1"


def test_a_config_file_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path):
    import os

    os.mkfifo(tmp_path / "c.toml")
    with pytest.raises(UsageError, match="not a regular file"):
        load_config(tmp_path / "c.toml", [])
