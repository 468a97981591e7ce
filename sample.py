"""Sample text from a checkpoint, or look inside it.

python sample.py --out_dir=out --prompt "The dog" [--num_samples=3 --max_new_tokens=200 ...]
python sample.py --out_dir=out --prompt @prompt.txt
python sample.py --out_dir=out --attention "The dog fetched the ball and she was happy" [--html page.html]
python sample.py --out_dir=out --probes probes.jsonl [--ablate L1H2] [--json]
python sample.py --out_dir=out --heads [--text FILE] [--ablate L1H2] [--ablation=mean] [--json]
python sample.py --out_dir=out --patch "The dog saw the ball and she" "The dog saw the ball and it" [--json]
python sample.py --out_dir=out --patch pairs.jsonl       # clean/corrupted pairs of your own (docs/patching.md)
python sample.py --out_dir=out --patch pairs.jsonl --paths   # and which head feeds which (path patching)
python sample.py --out_dir=out --export tl model.tl.pt    # TransformerLens; both need requirements-interop.txt
python sample.py --out_dir=out --export hf model-hf       # Hugging Face transformers
python sample.py --init_from=gpt2 --heads [--text FILE]  # a model trained elsewhere, in every mode above
"""

from __future__ import annotations

from common import cli

if __name__ == "__main__":  # before the imports below, so a Ctrl-C while torch loads is one line
    cli.report_interrupts_while_starting()

# isort: split
import argparse
import math
import sys
from dataclasses import Field, dataclass, fields
from functools import partial
from pathlib import Path
from typing import get_args, get_type_hints

import torch

from common.cli import ArgumentParser, add_options, check_options, default_of, option, run_cli, say
from common.errors import UsageError, warn
from common.files import check_utf8, destination, path_setting, read_text
from common.settings import DEVICES, POSITIVE, SEED, number, pick_device
from data.tokenizer import TokenizerError, known_token
from formats import Loaded, checkpoint_path, load_model
from formats.checkpoint import saved_settings
from formats.format import Source
from formats.sources import TARGETS, describe, identify, model_name
from model.hooks import Edits

# What sample.py does: sample text, or one of the looks (`LOOKS`: a look inside the checkpoint, or carrying it out).
LOOKS = ("attention", "probes", "heads", "patch", "export")
SAMPLING = ("prompt", "num_samples", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "no_cache")
# The options each mode takes besides those every mode takes (--out_dir, --init_from and its own).
TAKES = {
    "sample": (*SAMPLING, "device", "ablate"),
    "attention": ("device", "ablate", "query", "png_dir", "html", "json"),
    "probes": ("device", "ablate", "json"),
    "heads": ("device", "ablate", "text", "ablation", "json"),
    "patch": ("device", "png_dir", "answer", "wrong", "paths", "json"),
    "export": (),
}
# How to ask for a look, for an option that needs it; what a mode does instead of what an option would change.
ASK = {"attention": "--attention TEXT", "patch": "--patch CLEAN CORRUPTED", "heads": "--heads"}
INSTEAD = {"export": "converts the whole model on the CPU", "patch": "compares two whole runs of the model"}
# The values sampling takes besides train.py's POSITIVE and SEED (`cli.check_options`); --top_k's depend on the model.
TEMPERATURE = (lambda v: 0 <= v < math.inf, "{} must be a number >= 0 (0 is greedy), got {}")  # refuses nan
SHARE = (lambda v: v is None or 0 < v <= 1, "{} must be in (0, 1], got {}")


@dataclass
class Options:
    """sample.py's options, in --help's order (`GROUPS`): each its meaning, its rule (`check`), where argparse's own
    would not do its `metavar` or `nargs`, and where its mode would ignore it, what to say (`ignored`; else the words
    `ignored` finds for the modes that take it, `TAKES`)."""

    out_dir: str | None = option(None, "folder holding ckpt.pt (or the path of a .pt file) (default: out)")
    init_from: str | None = option(
        None,
        "a model trained elsewhere, instead of --out_dir: a Hugging Face GPT-2-family name (gpt2, "
        "gpt2-medium, gpt2-large, gpt2-xl, distilgpt2), a folder holding its config.json and "
        "model.safetensors, or a nanoGPT ckpt.pt (or its out_dir)",
        metavar="SOURCE",
    )
    prompt: str = option("\n", "text to continue (default: a newline); @FILE reads it from a file")
    num_samples: int = option(1, "how many samples", check=POSITIVE)
    max_new_tokens: int = option(200, "tokens to generate per sample", check=POSITIVE)
    temperature: float = option(0.8, "0 is greedy; higher is more random", check=TEMPERATURE)
    top_k: int | None = option(None, "sample only from the k most likely tokens")
    top_p: float | None = option(None, "sample from the smallest set with this much probability", check=SHARE)
    seed: int = option(1337, "random seed", check=SEED)
    device: str = option("auto", ", ".join(DEVICES) + " (or cuda:N)")
    no_cache: bool = option(False, "recompute the whole context for every token")
    attention: str | None = option(None, "heatmaps of TEXT's attention (PNG and TensorBoard)", metavar="TEXT")
    query: str | None = option(
        None, "token whose attention --attention prints: a word or a position (default: last pronoun)"
    )
    png_dir: str | None = option(
        None,
        "where --attention and --patch write PNGs (default: OUT_DIR/attention, OUT_DIR/patching; for "
        "a model from --init_from, out/KIND-NAME/attention, out/KIND-NAME/patching; with --json, none unless given)",
    )
    html: str | None = option(
        None,
        "with --attention: write an offline attention page (one HTML file) instead of PNGs",
        metavar="FILE.html",
        ignored="--html needs --attention TEXT, the sentence to show, e.g. "
        '--attention "The dog saw the ball and it" --html page.html',
    )
    probes: str | None = option(None, "print the head table for a probe file", metavar="FILE.jsonl")
    heads: bool = option(
        False,
        "what kind of head each head became (previous-token, induction, ...), against the "
        "untrained model, and what removing them costs",
    )
    patch: list[str] | None = option(
        None,
        "--patch CLEAN CORRUPTED: which heads carry the clean prompt's next token (activation patching, direct "
        "logit attribution, the logit lens; docs/patching.md); two prompts of as many tokens, or --patch FILE.jsonl "
        "of such pairs",
        metavar="TEXT",
        nargs="+",
    )
    answer: str | None = option(
        None,
        "with --patch: the right answer, one token (default: the clean prompt's greedy next token)",
        metavar="TOKEN",
    )
    wrong: str | None = option(
        None,
        "with --patch: the wrong answer, one token (default: the corrupted prompt's greedy next token)",
        metavar="TOKEN",
    )
    paths: bool = option(
        False,
        "with --patch: also which head feeds which (path patching: each head's output into each later head's "
        "queries, keys and values, each MLP and the logits), printed and drawn as a graph",
    )
    text: str | None = option(
        None,
        "with --heads: held-out text to score on (default: the run's val split, if its prepared data is still here)",
        metavar="FILE",
    )
    ablation: str = option(
        "zero",
        "with --heads: how a head is removed, its output set to 0 or to its mean over held-out text",
        ("zero", "mean"),
    )
    ablate: list = option([], "zero this head's output (repeatable), e.g. L1H2", metavar="LlHh")
    json: bool = option(
        False, "print machine-readable JSON instead of the report; files only where --png_dir or --html name them"
    )
    export: list[str] | None = option(
        None,
        "write the model for another library, computing the same function: 'tl FILE' for "
        "TransformerLens (a HookedTransformer's config and state dict), 'hf FOLDER' for Hugging Face "
        "transformers (a save_pretrained folder with a tokenizer giving this model's token ids)",
        metavar=("TARGET", "PATH"),
        nargs=2,
    )


OPTIONS = fields(Options)
GROUPS = {"attention": "looking inside", "export": "carrying a model out (pip install -r requirements-interop.txt)"}
TYPES = get_type_hints(Options)
PATH_OPTIONS = ("out_dir", "init_from", "png_dir", "html", "probes", "text")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser("sample.py", description="Sample from a trained checkpoint, or inspect its attention.")
    return add_options(parser, OPTIONS, GROUPS, reading)


def reading(option: Field) -> dict:
    """How argparse reads an option: by its type (a switch, a repeatable option, a number), with its default, said
    in --help unless its meaning says it, and what its metadata says of it."""
    kind = next((t for t in get_args(TYPES[option.name]) if t is not type(None)), TYPES[option.name])
    how = {"action": "store_true"} if kind is bool else {"action": "append"} if kind is list else {}
    if kind in (int, float):
        how["type"] = int if kind is int else partial(number, where=f"--{option.name}")
    shown = {key: option.metadata[key] for key in ("choices", "metavar", "nargs") if option.metadata.get(key)}
    said = "" if default_of(option) is None or "(default:" in option.metadata["help"] else " (default: %(default)s)"
    return {"default": default_of(option), "help": option.metadata["help"] + said, **how, **shown}


def ignored(option: Field, modes: list[str], mode: str) -> str:
    """The refusal of `option`, which applies to `modes` only, in `mode`."""
    name = option.name
    if "ignored" in option.metadata:
        return option.metadata["ignored"]
    if modes == ["sample"]:
        return f"--{name} applies to sampling text, which --{mode} does not do; drop --{name}"
    if "sample" in modes:
        return f"--{name} does not apply to --{mode}, which {INSTEAD[mode]}; drop --{name}"
    if len(modes) > 1:
        looks = ", ".join(f"--{look}" for look in modes[:-1]) + f" and --{modes[-1]}"
        return f"--{name} applies only to {looks}; drop it, or add one of them"
    return f"--{name} applies only to --{modes[0]}; drop it, or add {ASK[modes[0]]}"


def check_mode(args: argparse.Namespace) -> str:
    """ "sample" or one of LOOKS; a UsageError for an option that this mode would ignore."""
    looks = [name for name in LOOKS if getattr(args, name) not in (None, False)]
    if len(looks) > 1:
        what = "things to do with" if "export" in looks else "looks inside"
        raise UsageError(
            f"--{looks[0]} and --{looks[1]} are two different {what} a checkpoint; give one of them per command"
        )
    mode = looks[0] if looks else "sample"
    if mode == "export" and args.export[0] not in TARGETS:
        raise UsageError(
            f"--export {args.export[0]}: unknown target; give tl (TransformerLens) or hf (Hugging Face), "
            f"e.g. --export tl model.tl.pt"
        )
    for each in OPTIONS:
        modes = [taking for taking, names in TAKES.items() if each.name in names]  # none: every mode takes it
        if modes and mode not in modes and getattr(args, each.name) != default_of(each):
            raise UsageError(ignored(each, modes, mode))
    if mode == "patch" and len(args.patch) > 2:
        raise UsageError(
            f"--patch takes two prompts (CLEAN CORRUPTED) or one JSONL file of pairs, got {len(args.patch)} values; "
            f"quote each prompt"
        )
    if args.png_dir is not None and args.html is not None:
        raise UsageError(
            "--png_dir is where --attention writes PNGs, which --html replaces by one page; drop one of them"
        )
    if args.out_dir is not None and args.init_from is not None:
        raise UsageError(
            "--out_dir and --init_from both name the model to read; give one of them (--out_dir: a "
            "checkpoint train.py wrote; --init_from: a model trained elsewhere, such as gpt2)"
        )
    return mode


def prompt_ids(tokenizer, args: argparse.Namespace) -> list[int]:
    """The prompt's token ids. Without --prompt, the default (a newline) when this model knows it; else, with
    one warning, end-of-text for GPT-2's BPE (where its documents start), or a space (else the first character)
    for a character vocabulary."""
    prompt = args.prompt
    if prompt.startswith("@"):
        prompt = read_text(prompt[1:], "prompt file", "give --prompt @PATH of a text file", UsageError)
    if prompt == "":
        raise UsageError('the prompt is empty; give at least one character, e.g. --prompt "The"')
    try:
        return tokenizer.encode(prompt)
    except TokenizerError:
        if args.prompt != Options.prompt:
            raise
    ids = known_token(tokenizer)
    shown = "end-of-text" if getattr(tokenizer, "eot_id", None) is not None else repr(tokenizer.decode(ids))
    warn(
        f"no --prompt given, and this model never saw a newline (the default prompt); starting from {shown} "
        f"instead: give --prompt TEXT to choose"
    )
    return ids


def stream_samples(
    model, tokenizer, ids: list[int], args: argparse.Namespace, device: torch.device, edits: Edits | None = None
) -> None:
    """Prints each sample as it is generated. Only the new tokens are decoded (a long prompt is decoded once),
    and they are held back while they end inside a character: BPE pieces can split one across tokens."""
    generator = torch.Generator(device=device).manual_seed(args.seed)
    for n in range(args.num_samples):
        sys.stdout.write(tokenizer.decode(ids))
        pending: list[int] = []  # generated tokens not printed yet
        stream = model.generate_stream(
            torch.tensor([ids], device=device),
            args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            generator=generator,
            use_cache=not args.no_cache,
            edits=edits,
        )
        for token in stream:
            pending.append(int(token[0, 0]))
            text = tokenizer.decode(pending)
            if not text.endswith("\ufffd"):
                sys.stdout.write(text)
                sys.stdout.flush()
                pending.clear()
        sys.stdout.write("\n" + ("-" * 40 + "\n" if n < args.num_samples - 1 else ""))
    sys.stdout.flush()


def load(args: argparse.Namespace, device: torch.device, mode: str = "export") -> Loaded:
    """The model and tokenizer of --out_dir (default: out; every setting a checkpoint records is checked, whichever
    a mode reads) or --init_from, and where `mode`'s heatmaps go (`png_folder`). A model trained elsewhere says on
    stderr what it is."""
    if args.init_from is None:
        args.out_dir = args.out_dir or "out"
        source = identify(args.out_dir, model=False)
    else:
        source = identify(args.init_from)
        args.out_dir = args.init_from  # the name every report shows
    args.png_dir = png_folder(args, mode, source)
    loaded = load_model(source, device)
    if source.elsewhere:
        say(describe(loaded), file=sys.stderr)
    else:
        saved_settings(loaded.checkpoint, checkpoint_path(args.out_dir))
    return loaded


# The looks that draw heatmaps, and the folder beside the checkpoint they go to unless --png_dir says where.
PICTURES = {"attention": "attention", "patch": "patching"}


def png_folder(args: argparse.Namespace, mode: str, source: Source) -> str | None:
    """Where `mode` writes its heatmaps as PNGs, one rule for every look; None where it writes none. --png_dir,
    where given; else, for --attention and --patch, a folder beside the checkpoint (for a model trained elsewhere,
    out/KIND-NAME/..., out/gpt2/... for a hub model: nothing is written into another model's folder), unless
    --json asks for JSON instead of the report (it writes only what is named) or --html for a page instead."""
    if mode not in PICTURES or args.html is not None or args.png_dir is not None:
        return args.png_dir
    if args.json:
        return None
    if source.elsewhere:
        return str(Path("out") / (source.hub or f"{source.format.name}-{model_name(args.init_from)}") / PICTURES[mode])
    folder = Path(args.out_dir)
    return str((folder if folder.is_dir() else folder.parent) / PICTURES[mode])


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    for name, value in vars(args).items():  # a file name's byte that is not UTF-8 is refused before anything is read
        check_utf8(value, f"--{name}", "rename that file or folder to a UTF-8 name, or give another")
    for name in PATH_OPTIONS:  # every path given, as train.py's are: `~` expanded, empty or too long refused
        if getattr(args, name) is not None:
            setattr(args, name, path_setting(getattr(args, name), f"--{name}"))
    if args.export is not None:
        args.export[1] = path_setting(args.export[1], f"--export {args.export[0]}")
    if args.prompt.startswith("@"):
        args.prompt = "@" + path_setting(args.prompt[1:], "--prompt @FILE")
    mode = check_mode(args)
    check_options(OPTIONS, args, "--{}")  # before the model is read: no rule but --top_k's needs it
    if args.html is not None:
        args.html = str(destination(args.html, "--html", folder=False, fix="give a file path, e.g. page.html"))
    if mode == "export":
        from formats.export import export

        target, text = args.export
        path = TARGETS[target].destination(text)  # a path naming nothing to write is refused before the model is read
        say(*export(load(args, torch.device("cpu")), TARGETS[target], path, args.out_dir).splitlines())
        return 0
    device = pick_device(args.device)
    loaded = load(args, device, mode)
    model, tokenizer = loaded.model, loaded.tokenizer
    if args.top_k is not None and not 0 < args.top_k <= tokenizer.vocab_size:
        raise UsageError(f"--top_k must be between 1 and the vocabulary size {tokenizer.vocab_size}, got {args.top_k}")
    from watch.measure.heads import ablation_for

    try:
        ablate = ablation_for(args.ablate, model.config.n_layer, model.config.n_head)
    except ValueError as exc:
        raise UsageError(f"--ablate: {exc}") from None

    if mode == "sample":
        edits = ablate.edits() if ablate else None
        stream_samples(model, tokenizer, prompt_ids(tokenizer, args), args, device, edits)
        return 0
    from watch import inspect

    getattr(inspect, f"show_{mode}")(model, tokenizer, loaded.checkpoint, args, ablate)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(run_cli(main, sys.argv[1:]))
    except BrokenPipeError:  # `python sample.py | head` is fine
        sys.exit(0)
