"""How much the held-out figures move when the windows are drawn again: the in-context score with its
spread for each of several draws of the held-out windows (seeds 0, 1, ...; the watch uses seed 0), and
the largest change of any head's text-based type score between draws.

    python tools/window_draws.py out/grimms_fairy_tales --draws 5
    python tools/window_draws.py out/grimms_fairy_tales --draws 5 --text held_out.txt

The run's val split is read from its prepared data (or `--text FILE`), as `sample.py --heads` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from common.cli import run_cli  # noqa: E402
from common.errors import UsageError
from common.files import read_text  # noqa: E402
from data.prepare import find_prepared  # noqa: E402
from formats import load_model  # noqa: E402
from watch.measure.probesets import TEXT, ProbeSets, held_out_text  # noqa: E402
from watch.measure.reading import measure  # noqa: E402
from watch.show.kinds import shown  # noqa: E402

TEXT_SCORES = ("previous_token", "sink", "current_token", "broad", *(f"positional_{k}" for k in range(2, 9)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="the run's folder (or its ckpt.pt)")
    parser.add_argument("--draws", type=int, default=5, help="how many draws of the windows (seeds 0, 1, ...)")
    parser.add_argument("--text", default=None, help="held-out text to draw from instead of the run's val split")
    args = parser.parse_args(argv)
    loaded = load_model(args.out_dir, torch.device("cpu"))
    model, tokenizer = loaded.model, loaded.tokenizer
    if args.text is not None:
        tokens = tokenizer.encode(read_text(args.text, "text file", "give --text the path of a UTF-8 text file"))
    else:
        settings = loaded.checkpoint.get("data") or loaded.checkpoint.get("train_config") or {}
        prepared = find_prepared(settings, tokenizer.to_meta())
        if prepared is None:
            raise UsageError(f"the prepared data of {args.out_dir} is not here; give --text FILE")
        tokens = prepared.tokens("val")
    draws = []
    for seed in range(args.draws):
        windows = held_out_text(tokens, model.config.block_size, seed=seed)
        if isinstance(windows, str):
            raise UsageError(windows)
        results = measure(model, ProbeSets({TEXT: windows}))
        draws.append(results)
        # In nats saved later in the context, + better, as every view shows it (`watch.show.kinds.shown`).
        value, spread = shown(results.numbers)["in_context_score"], results.numbers["in_context_score_spread"]
        verdict = (
            "no measurable effect"
            if abs(value) <= spread
            else f"later tokens predicted {'better' if value > 0 else 'worse'}"
        )
        print(f"draw {seed}: in-context score {value:+.3f} ± {spread:.3f} nats ({windows.about}): {verdict}")
    values = [shown(r.numbers)["in_context_score"] for r in draws]
    smallest = min(r.numbers["in_context_score_spread"] for r in draws)
    print(
        f"range over {len(draws)} draws: {min(values):+.3f} to {max(values):+.3f} "
        f"(moves {max(values) - min(values):.3f}; the smallest spread {smallest:.3f})"
    )
    for name in TEXT_SCORES:
        stacked = torch.stack([r.heads[name] for r in draws])
        moved = float((stacked.max(0).values - stacked.min(0).values).max())
        print(f"{name}: any head's score moves by at most {moved:.3f} between draws")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, sys.argv[1:]))
