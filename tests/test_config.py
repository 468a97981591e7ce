"""Configs: TOML into a typed dataclass; every key and type checked; --key=value overrides, read by the
argparse parser that --help describes."""

import dataclasses
from pathlib import Path

import pytest

from bench.harness import load_config
from common.errors import UsageError
from common.settings import FIELDS, TrainConfig, make_config, parse_command_line

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_loads(path):
    assert isinstance(load_config(path, []), TrainConfig)


def test_shakespeare_char_is_nanogpts_cpu_recipe():
    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "shakespeare_char.toml", [])
    recipe = dict(
        n_layer=4,
        n_head=4,
        n_embd=128,
        block_size=64,
        batch_size=12,
        max_iters=2000,
        learning_rate=1e-3,
        min_lr=1e-4,
        warmup_iters=100,
        dropout=0.0,
        beta1=0.9,
        beta2=0.99,
        weight_decay=0.1,
        grad_clip=1.0,
        eval_interval=250,
        eval_iters=20,
        tokenizer="char",
        dataset="shakespeare",
        grad_accum=1,
        decay_iters=2000,
    )
    assert {k: cfg.to_dict(every=True).get(k, getattr(cfg, k, None)) for k in recipe} == recipe


def test_overrides_are_typed_and_win_over_the_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("n_layer = 3\nlearning_rate = 1\n")
    cfg = load_config(f, ["--n_layer=5", "--compile", "--dropout=0.1", '--watch_sentences=["a b", "c"]'])
    assert (cfg.model.n_layer, cfg.compile, cfg.model.dropout, cfg.learning_rate) == (5, True, 0.1, 1.0)
    assert cfg.watch_sentences == ["a b", "c"]
    assert isinstance(cfg.learning_rate, float)


def test_unknown_key_names_it_and_suggests(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("n_layers = 3\n")
    with pytest.raises(UsageError, match="unknown config key 'n_layers'.*did you mean 'n_layer'"):
        load_config(f, [])
    with pytest.raises(UsageError, match="'lerning_rate'.*'learning_rate'"):
        parse_command_line(["--lerning_rate=1"])
    with pytest.raises(UsageError, match="unexpected argument 'c.toml'; overrides look like --key=value"):
        load_config(f, ["c.toml"])  # the file is `path`: overrides hold none


@pytest.mark.parametrize(
    "text,match",
    [
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
    ],
)
def test_bad_config_files_get_one_clear_error(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text + "\n")
    with pytest.raises(UsageError, match=match):
        load_config(f, [])


def test_help_lists_every_key_with_its_default_and_meaning(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_command_line(["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    unwrapped = "".join(text.split())  # argparse wraps the help to the terminal's width
    for f in FIELDS.values():  # the model's keys among them, explained where GPTConfig declares them
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert f"--{f.name}={default!r}" in text
        assert "".join(f.metadata["help"].split()) in unwrapped, f.name


def test_a_file_then_overrides_each_win_over_the_one_before(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("n_layer = 3\nn_head = 2\nn_embd = 32\n")
    # The config file may come anywhere among the overrides, and a value may be the next word.
    for argv in (["--n_layer=5", str(f), "--seed", "7"], [str(f), "--n_layer", "5", "--seed=7"]):
        path, overrides = parse_command_line(argv)
        assert (path, overrides) == (str(f), {"n_layer": 5, "seed": 7})
        cfg = make_config(path, overrides)
        m = cfg.model
        assert (m.n_layer, m.n_head, m.n_embd, cfg.seed, m.block_size) == (5, 2, 32, 7, 64)
    assert parse_command_line(["--n_layer=1", "--n_layer=2"])[1] == {"n_layer": 2}  # the last one wins


def test_an_unknown_key_on_the_command_line_suggests_the_closest(tmp_path):
    for argv in (["--n_layers=2"], ["--n_layers", "2"], [str(tmp_path / "c.toml"), "--n_layers=2"]):
        with pytest.raises(UsageError) as error:
            parse_command_line(argv)
        assert str(error.value).startswith(
            "unknown config key 'n_layers' on the command line; did you mean 'n_layer'? valid keys: dataset, "
        )


@pytest.mark.parametrize("prefix", ["--n_lay=2", "--n_lay", "--learning=0.1", "--comp"])
def test_a_prefix_of_a_key_is_not_taken_for_the_key(prefix):
    with pytest.raises(UsageError, match=f"unknown config key '{prefix[2:].partition('=')[0]}' on the command line"):
        parse_command_line([prefix])


@pytest.mark.parametrize(
    "text,value",
    [
        ("true", True),
        ("True", True),
        ("1", True),
        ("yes", True),
        ("on", True),
        ("false", False),
        ("FALSE", False),
        ("0", False),
        ("no", False),
        ("off", False),
    ],
)
def test_boolean_spellings(text, value):
    assert parse_command_line([f"--compile={text}", f"--resume={text}"]) == (None, {"compile": value, "resume": value})


def test_a_bare_boolean_means_true_and_never_takes_the_next_word(tmp_path):
    assert parse_command_line(["--compile"]) == (None, {"compile": True})
    assert parse_command_line(["--compile", "c.toml", "--bias"]) == ("c.toml", {"compile": True, "bias": True})
    with pytest.raises(UsageError, match="'compile' on the command line must be true or false; got 'maybe'"):
        parse_command_line(["--compile=maybe"])


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--n_layer"], "argument --n_layer: expected one argument; see python train.py --help"),
        (["--n_layer", "--compile"], "argument --n_layer: expected one argument; see python train.py --help"),
        (
            ["a.toml", "b.toml"],
            "give at most one config file, got ['a.toml', 'b.toml']; put other settings as --key=value",
        ),
        (["-x"], "unexpected argument '-x'; overrides look like --key=value"),
        (["--n_layer=two"], "config key 'n_layer' on the command line must be an integer; got 'two'"),
    ],
)
def test_command_line_mistakes_are_one_usage_error(argv, message):
    with pytest.raises(UsageError) as error:
        parse_command_line(argv)
    assert str(error.value) == message


def test_a_byte_order_mark_is_not_part_of_the_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_bytes(b"\xef\xbb\xbf" + "n_layer = 3\r\nrun_name = 'été'\r\n".encode())
    cfg = load_config(f, [])
    assert (cfg.model.n_layer, cfg.run_name) == (3, "été")


def test_one_gpu_can_be_named_in_the_config():
    assert load_config(None, ["--device=cuda:1"]).device == "cuda:1"


def test_a_config_file_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path):
    import os

    os.mkfifo(tmp_path / "c.toml")
    with pytest.raises(UsageError, match="not a regular file"):
        load_config(tmp_path / "c.toml", [])
