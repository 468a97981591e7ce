"""sample.py's command line: argparse through the project's parser (one line per mistake, no abbreviations),
and which options go with which mode. train.py's own is in test_config.py."""

import re

import pytest

from common.errors import UsageError
from sample import build_parser, check_mode


def mode_of(*argv: str) -> str:
    return check_mode(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("argv", [["--temp=1"], ["--temp", "1"], ["--num=2"], ["--atten=the dog"], ["--top", "3"]])
def test_a_prefix_of_a_flag_is_not_taken_for_the_flag(argv):
    with pytest.raises(UsageError) as error:
        build_parser().parse_args(argv)
    assert str(error.value) == f"unrecognized arguments: {' '.join(argv)}; see python sample.py --help"


def test_help_says_each_default_once_and_none_that_is_not_one():
    text = " ".join(build_parser().format_help().split("options:")[1].split())  # unwrapped, without the usage
    assert "(default: None)" not in text
    for flag, next_flag in (
        ("--prompt PROMPT", "--num_samples"),
        ("--query QUERY", "--png_dir PNG_DIR"),
        ("--png_dir PNG_DIR", "--html"),
        ("--text FILE", "--ablation"),
    ):
        help_of_flag = text.split(flag, 1)[1].split(next_flag, 1)[0]
        assert help_of_flag.count("(default:") == 1, help_of_flag
    assert "--temperature TEMPERATURE 0 is greedy; higher is more random (default: 0.8)" in text


@pytest.mark.parametrize(
    "argv,mode",
    [
        ([], "sample"),
        (["--prompt=The dog", "--temperature=0", "--no_cache", "--ablate=L0H1", "--device=cpu"], "sample"),
        (["--attention=the dog saw it", "--query=it", "--png_dir=p", "--json", "--ablate=L0H0"], "attention"),
        (["--attention=the dog saw it", "--html=page.html"], "attention"),
        (["--probes=p.jsonl", "--json", "--device=cpu"], "probes"),
        (["--heads", "--text=t.txt", "--ablation=mean", "--json"], "heads"),
        (["--export", "hf", "folder"], "export"),
    ],
)
def test_each_mode_takes_its_own_options(argv, mode):
    assert mode_of(*argv) == mode


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--attention=x", "--probes=p"], "--attention and --probes are two different looks inside a checkpoint"),
        (["--heads", "--export", "tl", "f"], "--heads and --export are two different things to do with a checkpoint"),
        (["--export", "onnx", "f"], "--export onnx: unknown target"),
        (["--probes=p", "--temperature=1"], "--temperature applies to sampling text, which --probes does not do"),
        (["--export", "tl", "f", "--seed=3"], "--seed applies to sampling text, which --export does not do"),
        (["--export", "tl", "f", "--device=cpu"], "--device does not apply to --export"),
        (["--export", "tl", "f", "--ablate=L0H0"], "--ablate does not apply to --export"),
        (["--heads", "--query=it"], "--query applies only to --attention; drop it, or add --attention TEXT"),
        (["--png_dir=p"], "--png_dir applies only to --attention and --patch"),
        (["--heads", "--wrong=x"], "--wrong applies only to --patch; drop it, or add --patch CLEAN CORRUPTED"),
        (["--patch", "a", "b", "--ablate=L0H0"], "--ablate does not apply to --patch"),
        (["--html=page.html"], "--html needs --attention TEXT"),
        (["--attention=x", "--png_dir=p", "--html=page.html"], "--png_dir is where --attention writes PNGs"),
        (["--json"], "--json applies only to --attention, --probes, --heads and --patch"),
        (["--export", "tl", "f", "--json"], "--json applies only to --attention, --probes, --heads and --patch"),
        (["--probes=p", "--text=t.txt"], "--text applies only to --heads; drop it, or add --heads"),
        (["--attention=x", "--ablation=mean"], "--ablation applies only to --heads"),
    ],
)
def test_an_option_its_mode_would_ignore_is_refused(argv, message):
    with pytest.raises(UsageError, match=f"^{re.escape(message)}"):
        mode_of(*argv)
