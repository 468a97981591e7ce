"""Which settings a run starts from: the demo's config with no arguments, settings chosen for a user's
own text when `--dataset` names one and no config file is given (scaled to its size, printed in one
line, the command line winning), a config file alone when one is given, and a resumed run's model
shape from its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import shared_file

from common.settings import make_config
from tests.commands import TEXT, TINY, run_train
from trainer.start import BLOCK, DEMO_CONFIG, SIZES, STEPS, out_dir_for, resolve, settings_for_text


def config_of(config_path: str | None, overrides: dict):
    """Where `train.py [config_path] --key=value ...` starts, and its settings."""
    start = resolve([*([config_path] if config_path else []), *(f"--{k}={v}" for k, v in overrides.items())])
    return start, start.cfg


def same_settings(a, b) -> bool:
    return a.to_dict(every=True) == b.to_dict(every=True)


def corpus(tmp_path, characters: int = len(TEXT)):
    path = tmp_path / "my_story.txt"
    path.write_text((TEXT * (characters // len(TEXT) + 1))[:characters])
    return str(path)


def test_no_arguments_is_the_demo_and_a_config_file_replaces_every_base(tmp_path):
    start, cfg = config_of(None, {})
    assert same_settings(cfg, make_config(DEMO_CONFIG, {})) and start.name == "pronouns" and start.line() is None
    assert (cfg.dataset, cfg.out_dir, cfg.model.n_layer, cfg.model.block_size) == ("pronouns", "out/pronouns", 2, 32)
    # A generated corpus has no size to scale to: the demo's settings, as before.
    assert same_settings(
        config_of(None, {"dataset": "induction"})[1], make_config(DEMO_CONFIG, {"dataset": "induction"})
    )
    empty = tmp_path / "mine.toml"
    empty.write_text("# nothing: the built-in defaults\n")
    start, cfg = config_of(str(empty), {"dataset": corpus(tmp_path)})
    assert same_settings(cfg, make_config(empty, {"dataset": corpus(tmp_path)})) and start.line() is None
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.max_iters, cfg.out_dir) == (4, 128, 2000, "out")  # the defaults


def test_a_text_of_ones_own_gets_settings_chosen_for_it_and_the_command_line_wins(tmp_path):
    text = corpus(tmp_path, 400_000)
    start, cfg = config_of(None, {"dataset": text})
    assert start.name == "my_story"
    assert (cfg.tokenizer, cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) == ("char", 2, 4, 128)
    assert (cfg.model.block_size, cfg.max_iters, cfg.out_dir, cfg.watch_sentences) == (BLOCK, STEPS, "out/my_story", [])
    line = start.line()
    assert line.startswith(
        "settings chosen for my_story.txt (400,000 characters): char tokenizer, 2 layers x 4 "
        "heads x 128 dims, block 64, 2,000 steps of 1,024 tokens, checkpoint in out/my_story;"
    )
    assert "change any with --key=value" in line and line.endswith("every key: python train.py --help")
    start, cfg = config_of(None, {"dataset": text, "n_layer": 3, "tokenizer": "gpt2", "out_dir": "elsewhere"})
    assert (cfg.model.n_layer, cfg.tokenizer, cfg.out_dir) == (3, "gpt2", "elsewhere")


def test_the_settings_scale_with_the_text():
    big, small, tiny = (settings_for_text(n, "t") for n in (5_000_000, 20_000, 300))
    assert big["max_iters"] == STEPS and big["n_embd"] == SIZES["default"]["n_embd"] and big["dropout"] == 0.0
    # A short text: a smaller model with dropout, and no more than EPOCHS passes over it.
    assert small["n_embd"] < big["n_embd"] and small["dropout"] > 0
    assert small["max_iters"] * small["batch_size"] * small["block_size"] <= 10 * 20_000 * 0.9 + 50 * 1024
    # Too short for a block of 64 in its val split: a shorter block that fits.
    assert tiny["block_size"] < BLOCK and 300 * 0.1 >= tiny["block_size"] + 2
    # BPE packs about 4 characters a token: the same text is fewer tokens.
    assert settings_for_text(100_000, "t", tokenizer="gpt2")["n_embd"] < settings_for_text(400_000, "t")["n_embd"]
    # A shape fixed elsewhere (a checkpoint, an imported model) is kept; only training settings are chosen.
    fixed = {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256}
    chosen = settings_for_text(1_000_000, "t", tokenizer="gpt2", shape=fixed)
    assert {k: chosen[k] for k in fixed} == fixed and chosen["tokenizer"] == "gpt2"


def test_a_text_named_like_a_demo_does_not_take_its_folder():
    assert out_dir_for("grimm") == "out/grimm"
    assert out_dir_for("pronouns") == "out/pronouns-text" and out_dir_for("induction") == "out/induction-text"


def test_a_named_real_corpus_gets_chosen_settings_too():
    shared_file("data/tinyshakespeare.txt")
    start, cfg = config_of(None, {"dataset": "shakespeare"})
    assert start.line().startswith("settings chosen for shakespeare (1,115,394 characters)")
    assert cfg.out_dir == "out/shakespeare" and cfg.max_iters == STEPS


def run_on_own_text(tmp_path, *extra: str):
    """train.py with no config file, on a text of one's own: the chosen settings, made tiny on the command line."""
    args = [
        f"--dataset={corpus(tmp_path)}",
        f"--data_dir={tmp_path / 'prep'}",
        f"--out_dir={tmp_path / 'out'}",
        f"--log_dir={tmp_path / 'runs'}",
        *TINY,
        *extra,
    ]
    return run_train(args)


def test_the_chosen_settings_are_printed_once_at_the_start_and_a_resume_keeps_the_checkpoints_shape(tmp_path):
    code, out, err = run_on_own_text(tmp_path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("settings chosen for my_story.txt") and sum("settings chosen" in x for x in lines) == 1
    assert "1 layer x 2 heads x 16 dims, block 32, 6 steps of 128 tokens" in lines[0]  # the command line won
    # Resumed with only the text and the folder: the checkpoint's shape (1 layer, 16 wide), not the chosen one.
    code, out, err = run_train(
        [
            f"--dataset={corpus(tmp_path)}",
            f"--data_dir={tmp_path / 'prep'}",
            f"--out_dir={tmp_path / 'out'}",
            f"--log_dir={tmp_path / 'runs'}",
            "--resume",
            "--max_iters=8",
            "--warmup_iters=1",
            "--eval_interval=4",
            "--eval_iters=2",
            "--batch_size=4",
            "--sample_tokens=0",
            "--device=cpu",
            "--run_name=t",
        ]
    )
    assert (code, err) == (0, ""), err
    assert f"model shape from {tmp_path / 'out' / 'ckpt.pt'}" in out.splitlines()[0]
    assert "model: " in out and "1 layers x 2 heads x 16 dims, block 32" in out


@pytest.mark.parametrize("argv", [["--help"]])
def test_help_says_which_base_applies_when(argv, capsys):
    import train

    with pytest.raises(SystemExit):
        train.main(argv)
    text = " ".join(capsys.readouterr().out.split())
    assert "With no CONFIG.toml: configs/pronouns.toml (the demo), unless --dataset names real text" in text
    assert "resumed: the model's shape and tokenizer from the checkpoint" in text and "that file alone" in text


def test_a_text_that_cannot_be_read_is_the_usual_one_line_error_and_nothing_else(tmp_path):
    code, out, err = run_train([f"--dataset={tmp_path / 'missing.txt'}", f"--out_dir={tmp_path / 'out'}"])
    assert (code, out) == (1, "") and "neither a corpus name nor an existing file" in err and err.count("\n") == 1


def test_the_folder_named_after_a_text_stays_one_plain_folder_inside_out():
    """A text whose name is no folder name ('...txt' is '..' once its suffix goes) never sends a run's checkpoint
    out of out/: the run is called "text"."""
    from data.corpora import text_name

    for dataset in ("/x/...txt", "..txt", "a/..."):
        assert out_dir_for(text_name(dataset)) == "out/text", dataset
    for dataset in ("/x/.txt", "/data/my story.txt", "x/..y.txt"):
        folder = Path(out_dir_for(text_name(dataset)))
        assert folder.parent == Path("out") and folder.name not in ("", ".", ".."), dataset
