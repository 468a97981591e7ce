"""GPT-2 small's head types, as `sample.py --init_from=gpt2 --heads --json` finds them, beside the heads the
literature names: the induction heads 5.1, 5.5, 6.9, 7.2 and 7.10 and the previous-token head 4.11 (the
examples of TransformerLens's demos, after Olsson et al. 2022, "In-context learning and induction heads").

    python bench/pretrained_heads.py [--text FILE] [--device cpu] [--model FOLDER]

It needs GPT-2 small's weights (about 500 MB) from the Hugging Face hub, fetched once into the Hugging Face cache,
and `pip install -r requirements-interop.txt`. It has NOT been run where it was written: that machine cannot reach
the hub, and there it stops with sample.py's one line ("cannot fetch gpt2 ... pass a local folder") and exit 1.
The text types are measured on Tiny Shakespeare (../shared/data/tinyshakespeare.txt) when it is there, or on
--text FILE; without either, only the repeated-token types (induction, duplicate-token). `--heads` also removes
every typed head to see what it costs: on a CPU that is many passes of a 124M-parameter model, so expect tens of
minutes (docs/pretrained.md gives the time of one pass).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
NAMED = {
    "L5H1": "induction",
    "L5H5": "induction",
    "L6H9": "induction",
    "L7H2": "induction",
    "L7H10": "induction",
    "L4H11": "previous_token",
}
SHOWN = ("induction", "previous_token", "duplicate_token", "sink")
TOP = 10


def heads_report(model: str, text: Path | None, device: str) -> dict:
    """What `sample.py --init_from=MODEL --heads --json` prints; exits with its status and its one line of error
    when it fails (offline with nothing cached, transformers not installed, ...)."""
    command = [sys.executable, "sample.py", f"--init_from={model}", "--heads", "--json", f"--device={device}"]
    if text is not None:
        command.append(f"--text={text}")
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines() or [f"sample.py exited with status {run.returncode}"]
        print(f"pretrained_heads: {lines[-1]}", file=sys.stderr)
        sys.exit(run.returncode)
    print(f"$ python {' '.join(command[1:])}\n{run.stderr.strip()}")  # the second: what the model is
    return json.loads(run.stdout)


def ranks(heads: dict, kind: str) -> dict[str, int]:
    """Each head's rank (1: highest) by one score; heads without it are left out."""
    scored = sorted((h for h in heads if heads[h][kind] is not None), key=lambda h: -heads[h][kind])
    return {h: n + 1 for n, h in enumerate(scored)}


def score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def named_table(heads: dict) -> list[str]:
    by = {kind: ranks(heads, kind) for kind in ("induction", "previous_token")}
    lines = [
        f"{'head':<6} {'named as':<15} {'induction':>9} {'rank':>5} {'previous':>9} {'rank':>5} "
        f"{'untrained ind/prev':>19}  type here"
    ]
    for name, kind in NAMED.items():
        h = heads[name]
        untrained = f"{score(h['untrained']['induction'])}/{score(h['untrained']['previous_token'])}"
        lines.append(
            f"{name:<6} {kind.replace('_', '-'):<15} {score(h['induction']):>9} "
            f"{by['induction'].get(name, '-'):>5} {score(h['previous_token']):>9} "
            f"{by['previous_token'].get(name, '-'):>5} {untrained:>19}  {h['type_label'] or '-'}"
        )
    return lines


def top_lines(heads: dict) -> list[str]:
    lines = []
    for kind in SHOWN:
        order = sorted(ranks(heads, kind), key=ranks(heads, kind).get)[:TOP]
        if order:
            shown = ", ".join(f"{h} {heads[h][kind]:.2f}" + ("*" if NAMED.get(h) == kind else "") for h in order)
            lines.append(f"top {TOP} by {kind.replace('_', '-')}: {shown}")
    return lines


def agreement(heads: dict) -> str:
    found = [name for name, kind in NAMED.items() if heads[name]["type"] == kind]
    return f"{len(found)} of the {len(NAMED)} named heads are typed here as the literature names them" + (
        f" ({', '.join(found)})" if found else ""
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser("bench/pretrained_heads.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--text",
        type=Path,
        default=SHAKESPEARE if SHAKESPEARE.is_file() else None,
        help="text for the text types (default: Tiny Shakespeare from ../shared when present)",
    )
    parser.add_argument("--device", default="auto", help="as sample.py's --device")
    parser.add_argument(
        "--model",
        default="gpt2",
        help="GPT-2 small by hub name, or a folder holding its config.json and model.safetensors (default: gpt2)",
    )
    args = parser.parse_args(argv)
    report = heads_report(args.model, args.text, args.device)
    heads = report["heads"]
    print(f"GPT-2 small's heads on {'; '.join(report['probe_sets'].values())}")
    for why in report["not_measured"].values():
        print(f"({why})")
    print("\nthe heads the literature names (rank among all 144 by that score; * below marks them):")
    print("\n".join(named_table(heads)))
    print()
    print("\n".join(top_lines(heads)))
    print(agreement(heads))
    gain, untrained = report.get("in_context_gain"), report["untrained"].get("in_context_gain")
    if gain is not None:
        print(f"in-context gain on repeated random tokens: {gain:+.3f} nats/token (untrained {untrained:+.3f})")
    for ablation in report["ablations"]:
        if ablation["chosen_as"] in ("induction", "previous_token") and len(ablation["heads"]) > 1:
            print(
                f"without {', '.join(ablation['heads'])} ({ablation['chosen_as']}): in-context gain "
                f"{score(ablation.get('in_context_gain'))}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
