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
import functools
import math
import sys
from pathlib import Path

import torch

from common.cli import ArgumentParser, run_cli, say
from common.errors import UsageError, warn
from common.files import destination, path_setting, read_text, utf8_value
from common.settings import DEVICES, number, pick_device
from data.tokenizer import TokenizerError
from formats import Loaded, checkpoint_path, load_model
from formats.checkpoint import saved_settings
from formats.format import Source
from formats.sources import TARGETS, describe, identify, model_name
from model.hooks import Edits


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser("sample.py", description="Sample from a trained checkpoint, or inspect its attention.")
    p.add_argument("--out_dir", default=None, help="folder holding ckpt.pt (or the path of a .pt file) (default: out)")
    p.add_argument(
        "--init_from",
        metavar="SOURCE",
        default=None,
        help="a model trained elsewhere, instead of --out_dir: a Hugging Face GPT-2-family name (gpt2, "
        "gpt2-medium, gpt2-large, gpt2-xl, distilgpt2), a folder holding its config.json and "
        "model.safetensors, or a nanoGPT ckpt.pt (or its out_dir)",
    )
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline); @FILE reads it from a file")
    p.add_argument("--num_samples", type=int, default=1, help="how many samples (default: %(default)s)")
    p.add_argument(
        "--max_new_tokens", type=int, default=200, help="tokens to generate per sample (default: %(default)s)"
    )
    p.add_argument(
        "--temperature",
        type=functools.partial(number, where="--temperature"),
        default=0.8,
        help="0 is greedy; higher is more random (default: %(default)s)",
    )
    p.add_argument("--top_k", type=int, default=None, help="sample only from the k most likely tokens")
    p.add_argument(
        "--top_p",
        type=functools.partial(number, where="--top_p"),
        default=None,
        help="sample from the smallest set with this much probability",
    )
    p.add_argument("--seed", type=int, default=1337, help="random seed (default: %(default)s)")
    p.add_argument("--device", default="auto", help=", ".join(DEVICES) + " (or cuda:N) (default: %(default)s)")
    p.add_argument(
        "--no_cache", action="store_true", help="recompute the whole context for every token (default: %(default)s)"
    )
    look = p.add_argument_group("looking inside")
    look.add_argument("--attention", metavar="TEXT", help="heatmaps of TEXT's attention (PNG and TensorBoard)")
    look.add_argument(
        "--query",
        default=None,
        help="token whose attention --attention prints: a word or a position (default: last pronoun)",
    )
    look.add_argument(
        "--png_dir",
        default=None,
        help="where --attention and --patch write PNGs (default: OUT_DIR/attention, OUT_DIR/patching; for "
        "a model from --init_from, out/KIND-NAME/attention, out/KIND-NAME/patching; with --json, none unless given)",
    )
    look.add_argument(
        "--html",
        metavar="FILE.html",
        default=None,
        help="with --attention: write an offline attention page (one HTML file) instead of PNGs",
    )
    look.add_argument("--probes", metavar="FILE.jsonl", help="print the head table for a probe file")
    look.add_argument(
        "--heads",
        action="store_true",
        help="what kind of head each head became (previous-token, induction, ...), against the "
        "untrained model, and what removing them costs (default: %(default)s)",
    )
    look.add_argument(
        "--patch",
        nargs="+",
        metavar="TEXT",
        default=None,
        help="--patch CLEAN CORRUPTED: which heads carry the clean prompt's next token (activation patching, direct "
        "logit attribution, the logit lens; docs/patching.md); two prompts of as many tokens, or --patch FILE.jsonl "
        "of such pairs",
    )
    look.add_argument(
        "--answer",
        metavar="TOKEN",
        default=None,
        help="with --patch: the right answer, one token (default: the clean prompt's greedy next token)",
    )
    look.add_argument(
        "--wrong",
        metavar="TOKEN",
        default=None,
        help="with --patch: the wrong answer, one token (default: the corrupted prompt's greedy next token)",
    )
    look.add_argument(
        "--paths",
        action="store_true",
        help="with --patch: also which head feeds which (path patching: each head's output into each later head's "
        "queries, keys and values, each MLP and the logits), printed and drawn as a graph (default: %(default)s)",
    )
    look.add_argument(
        "--text",
        metavar="FILE",
        default=None,
        help="with --heads: held-out text to score on (default: the run's val split, if its prepared "
        "data is still here)",
    )
    look.add_argument(
        "--ablation",
        choices=("zero", "mean"),
        default="zero",
        help="with --heads: how a head is removed, its output set to 0 or to its mean over held-out "
        "text (default: %(default)s)",
    )
    look.add_argument(
        "--ablate",
        metavar="LlHh",
        action="append",
        default=[],
        help="zero this head's output (repeatable), e.g. L1H2 (default: %(default)s)",
    )
    look.add_argument(
        "--json",
        action="store_true",
        help="print machine-readable JSON instead of the report; files only where --png_dir or --html name them "
        "(default: %(default)s)",
    )
    out = p.add_argument_group("carrying a model out (pip install -r requirements-interop.txt)")
    out.add_argument(
        "--export",
        nargs=2,
        metavar=("TARGET", "PATH"),
        default=None,
        help="write the model for another library, computing the same function: 'tl FILE' for "
        "TransformerLens (a HookedTransformer's config and state dict), 'hf FOLDER' for Hugging Face "
        "transformers (a save_pretrained folder with a tokenizer giving this model's token ids)",
    )
    return p


PATH_OPTIONS = ("out_dir", "init_from", "png_dir", "html", "probes", "text")
LOOKS = (
    "attention",
    "probes",
    "heads",
    "patch",
    "export",
)  # what to do with a checkpoint instead of sampling: one at most
SAMPLING_OPTIONS = ("prompt", "num_samples", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "no_cache")
# (options, the modes they apply to, what to say when one is given in another mode)
MODE_RULES = (
    (SAMPLING_OPTIONS, ("sample",), "--{name} applies to sampling text, which --{mode} does not do; drop --{name}"),
    (
        ("device", "ablate"),
        ("sample", "attention", "probes", "heads", "patch"),
        "--{name} does not apply to --export, which converts the whole model on the CPU; drop --{name}",
    ),
    (("query",), ("attention",), "--{name} applies only to --attention; drop it, or add --attention TEXT"),
    (
        ("png_dir",),
        ("attention", "patch"),
        "--png_dir applies only to --attention and --patch; drop it, or add one of them",
    ),
    (
        ("answer", "wrong", "paths"),
        ("patch",),
        "--{name} applies only to --patch; drop it, or add --patch CLEAN CORRUPTED",
    ),
    (
        ("html",),
        ("attention",),
        "--html needs --attention TEXT, the sentence to show, e.g. "
        '--attention "The dog saw the ball and it" --html page.html',
    ),
    (
        ("json",),
        ("attention", "probes", "heads", "patch"),
        "--json applies only to --attention, --probes, --heads and --patch; drop it, or add one of them",
    ),
    (("text", "ablation"), ("heads",), "--{name} applies only to --heads; drop it, or add --heads"),
)


def check_mode(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str:
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
    for names, modes, message in MODE_RULES:
        for name in names:
            if mode not in modes and getattr(args, name) != parser.get_default(name):
                raise UsageError(message.format(name=name, mode=mode))
    if mode == "patch" and args.ablate:
        raise UsageError(
            "--ablate does not apply to --patch, which compares two whole runs of the model; drop --ablate"
        )
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


def validate(args: argparse.Namespace, vocab_size: int) -> None:
    for name, ok, rule in (
        ("max_new_tokens", args.max_new_tokens > 0, "must be positive"),
        ("seed", 0 <= args.seed < 2**32, "must be between 0 and 2**32 - 1"),  # as train.py accepts
        ("num_samples", args.num_samples > 0, "must be positive"),
        ("temperature", 0 <= args.temperature < math.inf, "must be a number >= 0 (0 is greedy)"),  # refuses nan
        (
            "top_k",
            args.top_k is None or 0 < args.top_k <= vocab_size,
            f"must be between 1 and the vocabulary size {vocab_size}",
        ),
        ("top_p", args.top_p is None or 0 < args.top_p <= 1, "must be in (0, 1]"),
    ):
        if not ok:
            raise UsageError(f"--{name} {rule}, got {getattr(args, name)}")


def prompt_ids(tokenizer, args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[int]:
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
        if args.prompt != parser.get_default("prompt"):
            raise
    eot = getattr(tokenizer, "eot_id", None)
    ids = [eot] if eot is not None else tokenizer.encode(" " if " " in tokenizer.chars else tokenizer.chars[0])
    shown = "end-of-text" if eot is not None else repr(tokenizer.decode(ids))
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
    parser = build_parser()
    args = parser.parse_args(argv)
    for name, value in vars(args).items():  # a file name's byte that is not UTF-8 is refused before anything is read
        problem = utf8_value(value)
        if problem is not None:
            raise UsageError(f"--{name} {problem}; rename that file or folder to a UTF-8 name, or give another")
    for name in PATH_OPTIONS:  # every path given, as train.py's are: `~` expanded, empty or too long refused
        if getattr(args, name) is not None:
            setattr(args, name, path_setting(getattr(args, name), f"--{name}"))
    if args.export is not None:
        args.export[1] = path_setting(args.export[1], f"--export {args.export[0]}")
    if args.prompt.startswith("@"):
        args.prompt = "@" + path_setting(args.prompt[1:], "--prompt @FILE")
    mode = check_mode(args, parser)
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
    validate(args, tokenizer.vocab_size)
    from watch.measure.heads import ablation_for

    try:
        ablate = ablation_for(args.ablate, model.config.n_layer, model.config.n_head)
    except ValueError as exc:
        raise UsageError(f"--ablate: {exc}") from None

    if mode == "sample":
        edits = ablate.edits() if ablate else None
        stream_samples(model, tokenizer, prompt_ids(tokenizer, args, parser), args, device, edits)
        return 0
    from watch import inspect

    getattr(inspect, f"show_{mode}")(model, tokenizer, loaded.checkpoint, args, ablate)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(run_cli(main, sys.argv[1:]))
    except BrokenPipeError:  # `python sample.py | head` is fine
        sys.exit(0)
