"""A run's settings: TOML files and `--key=value` overrides read into one typed dataclass, `TrainConfig`, which
holds the model's settings (`model`, a `GPTConfig`: model/config.py declares them) beside training's.

Every key is checked: an unknown key, a wrong type or an impossible value is a `UsageError` naming the key
and what would be valid. `--help` is built from the same field descriptions.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import math
import re
import shlex
import tomllib
from dataclasses import Field, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, get_type_hints

import torch

from common.cli import ArgumentParser, add_options, check_options, default_of, option
from common.errors import UsageError
from common.files import check_utf8, inside_name, name_too_long, path_setting, read_text
from common.parsing import TOO_DEEP, NotParsed, parse_int, parse_json, quoted
from data.corpora import NAMES as CORPORA
from data.tokenizer import TOKENIZERS
from model.config import CONFIG_KEYS, GPTConfig

DEVICES = ("auto", "cpu", "cuda", "mps")
SCRATCH, RESUME = "scratch", "resume"  # init_from's two words; anything else names a model to start from
DTYPES = ("auto", "float32", "bfloat16")


# A device's name (whether it exists here is `pick_device`'s job); ASCII digits only: str.isdigit() also
# accepts "²", which int() refuses.
DEVICE_NAME = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


def pick_device(name: str) -> torch.device:
    """ "auto" (cuda, then mps, then cpu), "cpu", "cuda", "cuda:N" or "mps", checked to exist here."""
    kind, _, index = name.partition(":")
    if not DEVICE_NAME.fullmatch(name):
        raise UsageError(f"unknown device {name!r}; use one of {', '.join(DEVICES)} (or cuda:N for one GPU)")
    mps = getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device={name} but no CUDA GPU is visible; use --device=auto or --device=cpu")
    if index and int(index) >= torch.cuda.device_count():
        raise UsageError(
            f"--device={name} but only {torch.cuda.device_count()} CUDA GPU(s) are visible; "
            f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    if name == "mps" and not mps:
        raise UsageError("--device=mps but MPS is not available; use --device=auto or --device=cpu")
    return torch.device(name)


# The values keys take, as each key's `check` (`cli.check_options`): whether a value is one, and the refusal of one
# that is not, of the key as the command names it (config key 'x', --x) and the value. sample.py's options share them.
DEVICE = (DEVICE_NAME.fullmatch, f"{{0}} must be one of {', '.join(DEVICES)} or cuda:N; got {{1!r}}")
MODEL_SOURCE = (
    str.strip,
    f"{{}} is empty; give {SCRATCH}, {RESUME}, a Hugging Face GPT-2 "
    f"name (e.g. gpt2) or the path of a model to fine-tune",
)
TEXT = (
    str.strip,
    f"{{}} is empty; give a corpus name ({', '.join(CORPORA)}) or the path of a UTF-8 text file",
)
POSITIVE = (lambda v: v > 0, "{} must be a positive integer; got {}")
NOT_NEGATIVE = (lambda v: v >= 0, "{} must be >= 0; got {}")
# what every generator it seeds accepts, with room for per-rank offsets
SEED = (lambda v: 0 <= v < 2**32, "{} must be between 0 and 2**32 - 1; got {}")
RATE = (lambda v: v > 0, "config keys 'learning_rate' and 'muon_lr' must be > 0")
FRACTION = (lambda v: 0 < v < 1, "{} must be between 0 and 1; got {}")
BETA = (lambda v: 0 <= v < 1, "{} must be in [0, 1); got {}")
SENTENCES = (
    lambda v: all(isinstance(s, str) and s.strip() for s in v),
    "{} must be a list of non-empty strings",
)


@dataclass
class TrainConfig:
    # data
    dataset: str = option("pronouns", f"named corpus ({', '.join(CORPORA)}) or a path to a UTF-8 text file", check=TEXT)
    tokenizer: str = option("char", "char (characters of the corpus) or gpt2 (GPT-2 BPE, compacted)", TOKENIZERS)
    val_fraction: float = option(0.1, "share of the corpus held out for validation (the tail)", check=FRACTION)
    data_dir: str = option("data/prepared", "where prepared token files are cached")
    corpus_sentences: int = option(
        30000, "sentences (lines) generated for a generated corpus: pronouns, induction", check=POSITIVE
    )
    # model
    init_from: str = option(
        SCRATCH,
        "scratch (a new model of the sizes below), resume (the same as --resume), or "
        "a model to fine-tune: a Hugging Face GPT-2 name (gpt2, gpt2-medium, gpt2-large, gpt2-xl, "
        "distilgpt2), a folder holding a GPT2LMHeadModel, a nanoGPT ckpt.pt or its out_dir, or a "
        "gptwatch checkpoint (a new run from its weights). That model decides the model keys and "
        "the tokenizer: any given must agree with it; a smaller block_size crops it",
        check=MODEL_SOURCE,
    )
    model: GPTConfig = field(default_factory=GPTConfig)  # its keys: model/config.py
    # optimisation
    optimizer: str = option("adamw", "adamw, or muon (Muon on hidden matrices, AdamW on the rest)", ("adamw", "muon"))
    batch_size: int = option(12, "sequences per micro-batch (per process)", check=POSITIVE)
    grad_accum: int = option(1, "micro-batches per optimizer step, summed over all processes", check=POSITIVE)
    max_iters: int = option(2000, "optimizer steps", check=POSITIVE)
    learning_rate: float = option(1e-3, "peak learning rate", check=RATE)
    min_lr: float = option(1e-4, "learning-rate floor at the end of the cosine decay", check=NOT_NEGATIVE)
    warmup_iters: int = option(100, "steps of linear warm-up", check=NOT_NEGATIVE)
    lr_decay_iters: int = option(0, "step where the cosine reaches min_lr (0: max_iters)", check=NOT_NEGATIVE)
    weight_decay: float = option(
        0.1,
        "AdamW weight decay, on the matrices AdamW trains: with optimizer = muon, the blocks' hidden matrices get none",
        check=NOT_NEGATIVE,
    )
    beta1: float = option(0.9, "AdamW beta1", check=BETA)
    beta2: float = option(0.99, "AdamW beta2", check=BETA)
    grad_clip: float = option(1.0, "clip the gradient norm to this (0: off)", check=NOT_NEGATIVE)
    muon_lr: float = option(0.02, "Muon learning rate for hidden matrices (optimizer = muon)", check=RATE)
    muon_ns_steps: int = option(5, "Newton-Schulz iterations that orthogonalise each Muon update", check=POSITIVE)
    muon_dtype: str = option(
        "auto",
        "precision of those iterations; auto: bfloat16 on CUDA and on CPUs with "
        "bfloat16 matmul units (AVX512-BF16, AMX), float32 elsewhere",
        DTYPES,
    )
    # evaluation and logging
    eval_interval: int = option(250, "steps between evaluations", check=POSITIVE)
    eval_iters: int = option(20, "batches per split in each evaluation", check=POSITIVE)
    log_interval: int = option(10, "steps between progress-bar and TensorBoard updates", check=POSITIVE)
    watch_interval: int = option(
        25,
        "steps between head scores in TensorBoard (head types, probes), a cheap dense "
        "curve of each head (scalars only; 0: only at evaluations)",
        check=NOT_NEGATIVE,
    )
    watch_paths: bool = option(
        True,
        "path patching at every watch pass: which head feeds which, a graph and its scalars in TensorBoard "
        "(false: a cheaper pass without it)",
    )
    sample_tokens: int = option(
        200, "tokens in the text sample logged at each evaluation (0: none)", check=NOT_NEGATIVE
    )
    sample_prompt: str = option("\n", "prompt of that sample")
    probes: str = option("", "JSONL probe file for attention metrics ('' : the corpus's own, if any)")
    agreement: str = option(
        "",
        "JSONL file of single-person contexts for pronoun agreement and head ablation ('' : the corpus's own, if any)",
    )
    watch_sentences: list = option(
        [], "sentences whose attention heatmaps are logged at each evaluation", check=SENTENCES
    )
    ablation: str = option(
        "zero",
        "how the end-of-run report removes a head: zero (its output becomes 0) or mean "
        "(its mean output over held-out text)",
        ("zero", "mean"),
    )
    # checkpoints and runs
    out_dir: str = option("out", "folder for ckpt.pt")
    ckpt_interval: int = option(
        0,
        "also checkpoint every N steps, so a crash or kill -9 loses at most N steps "
        "(0: only at evaluations that improve val loss, on Ctrl-C/SIGTERM, and at the end)",
        check=NOT_NEGATIVE,
    )
    resume: bool = option(False, "continue from out_dir/ckpt.pt")
    log_dir: str = option("runs", "TensorBoard root folder")
    run_name: str = option(
        "", "TensorBoard run name ('' : the config's name, the time, the process id and a random part)"
    )
    seed: int = option(1337, "random seed for initialisation and batches", check=SEED)
    device: str = option("auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps", check=DEVICE)
    dtype: str = option("auto", "auto: bfloat16 autocast on CUDA, float32 elsewhere", DTYPES)
    compile: bool = option(False, "torch.compile the model (slow start, faster steps)")
    threads: int = option(
        0,
        "CPU threads for torch (0: torch's default, a thread per core; on a machine other programs keep busy, the "
        "cores they leave free when the run starts)",
        check=NOT_NEGATIVE,
    )

    # The keys the user set, in a config file they named or on the command line (`make_config` records them): a
    # model to fine-tune (`init_from`) decides every model key not among them. Not a setting itself.
    given: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        if self.init_from == RESUME:  # nanoGPT's spelling of --resume
            self.resume = True
        for name, value in self.to_dict(every=True).items():
            _check_value(name, value)
        check_options(dataclasses.fields(self), self, "config key '{}'")
        for name, value in checked_paths(self.to_dict()).items():
            setattr(self, name, value)
        problem = inside_name(self.run_name) if self.run_name else None
        if problem is not None:  # TensorBoard writes log_dir/run_name, and nothing outside log_dir
            raise UsageError(
                f"config key 'run_name' {problem}: it must name a folder inside log_dir (a subfolder "
                f"such as 'a/b' is fine), not '..', '.', an empty part or an absolute path; "
                f"got {self.run_name!r}"
            )
        if name_too_long(self.run_name) is not None:
            raise UsageError(f"config key 'run_name' {name_too_long(self.run_name)}; shorten it")
        if self.min_lr > self.learning_rate:  # the cosine "decay" would raise the learning rate
            raise UsageError(
                f"config key 'min_lr' ({self.min_lr:g}) is above 'learning_rate' "
                f"({self.learning_rate:g}), so the schedule would decay upwards; set --min_lr to at most "
                f"the learning rate, e.g. --min_lr={self.learning_rate / 10:g}"
            )

    @classmethod
    def from_keys(cls, **keys: Any) -> TrainConfig:
        """Settings from their keys, as a config file and the command line write them: the model's (n_layer, ...)
        beside the others. A value that breaks the model's rules is a UsageError naming its key."""
        for name, value in keys.items():
            _check_value(name, value)
        model = {name: keys.pop(name) for name in CONFIG_KEYS if name in keys}
        try:  # the model's sizes follow the model's own rules
            keys["model"] = GPTConfig(**model)
        except ValueError as exc:
            raise UsageError(f"config key {exc}") from None
        return cls(**keys)

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The model these settings describe, for a vocabulary of `vocab_size`."""
        return dataclasses.replace(self.model, vocab_size=vocab_size)

    @property
    def fine_tunes(self) -> bool:
        """Whether the run starts from a model trained elsewhere (or another run's checkpoint)."""
        return self.init_from not in (SCRATCH, RESUME)

    def replaced(self, **keys: Any) -> TrainConfig:
        """These settings with the values of `keys` changed (and checked again), the keys the user set kept."""
        new = TrainConfig.from_keys(**{**self.to_dict(every=True), **keys})
        new.given = self.given
        return new

    @property
    def decay_iters(self) -> int:
        return self.lr_decay_iters or self.max_iters

    def to_dict(self, *, every: bool = False) -> dict:
        """Every setting by its key, the model's in its place among them: of the model's options, only those set
        (`GPTConfig.to_dict`) unless `every`, so a run without them is recorded as it was before they existed."""
        recorded = self.model.to_dict()
        kept = [name for name in FIELDS if name not in CONFIG_KEYS or every or name in recorded]
        return {name: copy.copy(getattr(self.model if name in CONFIG_KEYS else self, name)) for name in kept}


# {key: its field} for every key a config sets, in order: the model's (`GPTConfig`'s) where `TrainConfig.model` stands.
FIELDS = {
    g.name: g
    for f in dataclasses.fields(TrainConfig)
    for g in ([g for g in dataclasses.fields(GPTConfig) if g.name in CONFIG_KEYS] if f.name == "model" else [f])
}
# The groups --help lists the keys in, each by its first key.
GROUPS = {"dataset": "data", "init_from": "model", "optimizer": "optim", "eval_interval": "eval", "out_dir": "run"}
_TYPES = {**get_type_hints(TrainConfig), **get_type_hints(GPTConfig)}
_TYPES = {name: _TYPES[name] for name in FIELDS}
BOOLEAN_WORDS = dict.fromkeys(("1", "true", "yes", "on"), True) | dict.fromkeys(("0", "false", "no", "off"), False)
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list"}


# The settings that name a file or folder; a corpus name, a hub name, scratch or resume passes their check unchanged.
# Empty, probes and agreement mean the corpus's own file; dataset and init_from are refused by their `check`.
PATH_KEYS = ("dataset", "data_dir", "out_dir", "log_dir", "init_from", "probes", "agreement")
MAY_BE_EMPTY = ("probes", "agreement", "dataset", "init_from")


def checked_paths(values: dict[str, Any]) -> dict[str, Any]:
    """The path settings among `values`, each through `files.path_setting`: `~` expanded; empty (where that means
    nothing) or a part too long for a file name refused, naming the key."""
    return {
        key: path_setting(values[key], f"config key '{key}'", may_be_empty=key in MAY_BE_EMPTY)
        for key in PATH_KEYS
        if isinstance(values.get(key), str)
    }


def _check_value(name: str, value: Any) -> None:
    """What every key's value must be, whatever the key: finite, one of its choices, without NUL, UTF-8."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"config key '{name}' must be a finite number; got {value}")
    choices = FIELDS[name].metadata.get("choices") if name in FIELDS else None
    if choices and value not in choices:
        raise UsageError(f"config key '{name}' must be one of {', '.join(choices)}; got {value!r}")
    if isinstance(value, str) and "\x00" in value:
        raise UsageError(
            f"config key '{name}' holds a NUL character (\\u0000), which no name or path can hold; remove it"
        )
    # a file name's byte that is not UTF-8: refused before anything is written
    check_utf8(value, f"config key '{name}'", "rename that file or folder to a UTF-8 name, or choose another")


def _unknown_key(key: str, where: str) -> UsageError:
    close = difflib.get_close_matches(key, FIELDS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return UsageError(f"unknown config key '{key}' {where}; {hint}valid keys: {', '.join(FIELDS)}")


def _coerce(key: str, value: Any, where: str) -> Any:
    """A TOML value checked against the field's type (ints are accepted as floats)."""
    expected = _TYPES[key]
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    return _raise_type(key, value, where)


def _raise_type(key: str, value: Any, where: str) -> Any:
    shown = quoted(value) if isinstance(value, str) else repr(value)
    raise UsageError(f"config key '{key}' {where} must be {_TYPE_WORDS[_TYPES[key]]}; got {shown}")


def parse_cli_value(key: str, text: str) -> Any:
    """A value's text on the command line -> the field's type (argparse's `type` for the key)."""
    expected = _TYPES[key]
    where = "on the command line"
    try:
        if expected is bool:
            return BOOLEAN_WORDS[text.lower()] if text.lower() in BOOLEAN_WORDS else _raise_type(key, text, where)
        if expected is int:
            return parse_int(text)
        if expected is float:
            return number(text, f"config key '{key}' {where}")
        if expected is list:  # written in TOML
            return _coerce(key, parse_json(f"v = {text}", tomllib.loads)["v"], where)
    except NotParsed as exc:
        if expected is not list:  # a whole number too long for any setting
            raise UsageError(f"config key '{key}' {where} is {exc}; got {quoted(text)}") from None
        # The parser's reason, its columns counted in `text`, not in the "v = " put before it: a list whose string
        # holds an escape TOML refuses is a bad escape, not a bad list.
        why = re.sub(r"\(at line 1, column (\d+)\)", lambda m: f"(at character {int(m[1]) - 4})", str(exc))
        raise UsageError(
            f"config key '{key}' on the command line is not valid TOML: {why}; got {quoted(text)}; "
            f"write a TOML list of strings, e.g. --{key}='[\"the dog saw it\"]'"
        ) from None
    except ValueError:
        return _raise_type(key, text, where)
    return text


def number(text: str, where: str) -> float:
    """`text` as a number, as float() reads it, for the setting `where` names; text that is none, or a number too
    small for a 64-bit float (which float() reads as 0: 1e-400), a UsageError saying so: the setting would otherwise
    get 0 for it. Both commands' numbers, on the command line and in config files, are read here."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{where} must be a number; got {quoted(text)}") from None
    if value == 0 and re.search(r"[1-9]", re.split(r"[eE]", text)[0]):
        raise UsageError(
            f"{where}: {text} is too small for a 64-bit float, which reads it as 0; give 0 or a number of at least "
            f"1e-300"
        )
    return value


def read_toml(path: str | Path) -> dict:
    path = Path(path)
    text = read_text(path, "config file", "give the path of a .toml file (see configs/)", UsageError)
    try:
        raw = parse_json(text, partial(tomllib.loads, parse_float=lambda t: number(t, f"config file {path}")))
    except NotParsed as exc:
        where = str(exc)
        if "line" not in where and where != TOO_DEEP:  # "at end of document": the error is on the last line
            where += f" (line {max(1, len(text.splitlines()))})"
        if path.suffix != ".toml":  # `train.py corpus.txt`: a text to train on, given where a config file goes
            raise UsageError(
                f"{path} is not a TOML config file ({where}); to train on it, give it as "
                f"--dataset={shlex.quote(str(path))} (a config file is a .toml file of key = value lines)"
            ) from None
        raise UsageError(f"config file {path} is not valid TOML: {where}; fix the syntax there") from None
    values = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            raise UsageError(
                f"config file {path} has a table [{key}]; keys are flat (write `key = value` at the top level)"
            )
        if key not in FIELDS:
            raise _unknown_key(key, f"in {path}")
        values[key] = _coerce(key, value, f"in {path}")
    return values


class _KeyEqualsDefault(argparse.HelpFormatter):
    """Each key as `--key=DEFAULT`, the spelling that works for every key, with its meaning beside it."""

    def _format_action_invocation(self, action: argparse.Action) -> str:  # how argparse shows an option
        if not action.option_strings or action.nargs == 0:  # CONFIG.toml, --help
            return super()._format_action_invocation(action)
        return f"{action.option_strings[0]}={action.metavar}"


def parse_command_line(argv: list[str], bases: str | None = None) -> tuple[str | None, dict]:
    """`[CONFIG.toml] [--key=value ...]` -> (the config file, if any; {key: value} of what the command line
    sets). Every field of `TrainConfig` is an option whose value `parse_cli_value` reads, listed under its group in
    --help with its default and meaning; `bases` says which settings a command line without a config file starts
    from. A value may also follow its key as the next word (`--n_layer 2`), except a boolean's: a bare boolean key
    means true, so `--compile configs/x.toml` keeps the file as the config."""
    parser = ArgumentParser(
        "train.py",
        usage="python %(prog)s [CONFIG.toml] [--key=value ...]",
        formatter_class=partial(_KeyEqualsDefault, max_help_position=30),
        description=(
            "Trains a GPT. "
            + (f"{bases} " if bases else "")
            + "Every key below can be set in the TOML file and on the command line, which wins over any base: "
            "--key=value or --key value, and a boolean as --key=false or a bare --key (true). The values shown are the "
            "built-in defaults that every CONFIG file starts from."
        ),
    )
    parser.add_argument("config", nargs="*", metavar="CONFIG.toml", help="a flat TOML file of the keys below")

    def reading(key: Field) -> dict:  # no default: only what the command line gives may win over the config file
        return dict(type=partial(parse_cli_value, key.name), default=argparse.SUPPRESS, metavar=repr(default_of(key)))

    add_options(parser, FIELDS.values(), GROUPS, reading)
    argv = [f"{arg}=true" if arg.startswith("--") and _TYPES.get(arg[2:]) is bool else arg for arg in argv]
    args, unknown = parser.parse_known_intermixed_args(argv)
    if unknown and unknown[0].startswith("--"):
        raise _unknown_key(unknown[0][2:].partition("=")[0], "on the command line")
    if unknown:
        raise UsageError(f"unexpected argument {unknown[0]!r}; overrides look like --key=value")
    values = vars(args)
    configs = values.pop("config")
    if len(configs) > 1:
        raise UsageError(f"give at most one config file, got {configs}; put other settings as --key=value")
    return (configs[0] if configs else None), values


def saved_config(values: dict, where: str) -> TrainConfig:
    """The settings a checkpoint recorded (its train_config), checked as a config file's are: a value of the
    wrong type or out of range is a `UsageError` naming the key. Keys this version does not know (another
    version wrote them) are left out, and keys it lacks take their defaults."""
    values = {key: _coerce(key, value, where) for key, value in values.items() if key in FIELDS}
    # An empty folder meant the one the run was started in, before such paths were refused: read it as that.
    values |= {key: "." for key in PATH_KEYS if key not in MAY_BE_EMPTY and values.get(key) == ""}
    return TrainConfig.from_keys(**values)


def make_config(
    path: str | Path | None, overrides: dict, base: dict | None = None, *, chosen: bool = True
) -> TrainConfig:
    """The built-in defaults, then `base` (settings chosen for a text, `trainer.start`), then the config
    file at `path` (if any), then `overrides`: each wins over the one before, and the result is validated once,
    whichever set each key. The keys of the file count as given by the user (`TrainConfig.given`) when they
    `chosen` it, not when it is a default."""
    from_file = read_toml(path) if path is not None else {}
    keys = {**(base or {}), **from_file, **overrides}
    if keys.get("init_from") == RESUME and keys.get("resume") is False:  # a resume and a new run at once
        raise UsageError(
            f"config key 'init_from' is {RESUME!r}, which continues out_dir's checkpoint as --resume does, but "
            f"'resume' is false; drop one of the two"
        )
    cfg = TrainConfig.from_keys(**keys)
    cfg.given = frozenset(overrides) | (frozenset(from_file) if chosen else frozenset())
    return cfg
