"""`sample.py --attention` (heatmaps, or with `--html` an offline attention page) and `sample.py --probes`:
look inside a checkpoint."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from errors import UsageError, UserError
from watch.capture import capture_attention
from watch.heads import ablation_names, head_name
from watch.heatmaps import head_figure, layer_figure, save_png
from watch.metrics import evaluate_probes
from watch.page import attention_page, sentence_view, write_page
from watch.report import (
    ablation_line,
    display_token,
    focused_head,
    head_table,
    last_pronoun_pos,
    top_attended,
)
from watch.tensorboard import TensorBoardWriter, sentence_slug


def _query_position(tokens: list[str], query: str | None) -> int:
    """--query as a position or a word; by default the last pronoun, else the last token."""
    if query is None:
        found = last_pronoun_pos(tokens)
        return len(tokens) - 1 if found is None else found
    if query.lstrip("-").isdigit():
        pos = int(query)
        pos = pos + len(tokens) if pos < 0 else pos
        if not 0 <= pos < len(tokens):
            raise UsageError(f"--query {query} is outside the {len(tokens)} tokens; give 0..{len(tokens) - 1}")
        return pos
    words = [t.strip().lower() for t in tokens]
    matches = [i for i, w in enumerate(words) if w == query.strip().lower()]
    if not matches:
        raise UsageError(f"--query {query!r} is not a token of the text; tokens are: "
                         f"{', '.join(repr(t) for t in tokens)}")
    return matches[-1]


def show_attention(model, tokenizer, checkpoint: dict, args: argparse.Namespace, ablate: dict) -> None:
    text = args.attention
    if not text:
        raise UsageError("--attention needs a non-empty text, e.g. --attention \"The dog saw the ball and it\"")
    ids = tokenizer.encode(text)
    tokens = tokenizer.token_strings(ids)
    if len(ids) > model.config.block_size:
        raise UsageError(f"the text has {len(ids)} tokens, more than the model's block_size "
                         f"{model.config.block_size}; shorten it")
    patterns = capture_attention(model, [ids], ablate or None)[0]
    query = _query_position(tokens, args.query)
    layer, head = focused_head(patterns, query)

    if args.html:
        view = sentence_view(text, tokens, patterns, query=query)
        step = f" at step {checkpoint['step']}" if "step" in checkpoint else ""
        ablated = f", with {', '.join(ablation_names(ablate))} ablated" if ablate else ""
        page = write_page(args.html, attention_page([view], f"Attention of {args.out_dir}{step}{ablated}"))
    if args.json:
        print(json.dumps({
            "text": text, "tokens": tokens, "query_pos": query, "focused_head": head_name(layer, head),
            "ablated": ablation_names(ablate),
            # [layer][head][query_pos][key_pos]
            "patterns": [[[[round(float(w), 6) for w in row] for row in h] for h in p.tolist()] for p in patterns],
        }))
        return
    if not args.html:
        png_dir = _write_heatmaps(checkpoint, args, tokens, patterns, query, (layer, head))

    print("tokens: " + " | ".join(display_token(t, space_mark="") for t in tokens))
    print(f"where {tokens[query].strip()!r} (position {query}) looks, top 3 per head:")
    for n, pattern in enumerate(patterns):
        print(top_attended(pattern, tokens, query, k=3, layer=n))
    print(f"most focused head: {head_name(layer, head)}")
    if args.html:
        print(f"attention page: {page} (open it in a browser; it needs no network)")
    else:
        print(f"heatmaps: {png_dir}/{sentence_slug(text)}_*.png")


def _write_heatmaps(checkpoint: dict, args: argparse.Namespace, tokens: list[str], patterns: list, query: int,
                    focused: tuple[int, int]) -> Path:
    """PNGs of every layer and of the focused head, also added to the checkpoint's TensorBoard run;
    returns their folder."""
    png_dir = Path(args.png_dir) if args.png_dir else Path(args.out_dir if Path(args.out_dir).is_dir()
                                                           else Path(args.out_dir).parent) / "attention"
    slug = sentence_slug(args.attention)
    name = head_name(*focused)
    figures = {f"{slug}_layer{n}.png": layer_figure(p, tokens, n) for n, p in enumerate(patterns)}
    figures[f"{slug}_{name}.png"] = head_figure(
        patterns[focused[0]][focused[1]], tokens, f"{name}: most focused head for {tokens[query].strip()!r}",
        highlight_query=query)
    try:
        for file_name, fig in figures.items():
            save_png(fig, png_dir / file_name)
    except OSError as exc:
        raise UserError(f"cannot write the heatmaps to {png_dir} ({exc.strerror or exc}); choose a writable "
                        f"--png_dir") from None
    _log_to_run(checkpoint, slug, figures)
    return png_dir


def _log_to_run(checkpoint: dict, slug: str, figures: dict) -> None:
    """Adds the heatmaps to the checkpoint's TensorBoard run, under inspect/."""
    config = checkpoint.get("train_config")
    run = checkpoint.get("run_name")
    root = config.get("log_dir", "runs") if isinstance(config, dict) else None
    if not isinstance(run, str) or not run or not isinstance(root, str):
        return
    log_dir = Path(root) / run
    writer = TensorBoardWriter(log_dir, fix="the heatmaps are in the PNG files")
    for name, fig in figures.items():
        writer.add_figure(f"inspect/{slug}/{Path(name).stem.removeprefix(slug + '_')}", fig, checkpoint.get("step", 0))
    writer.close()
    if not writer.failed:
        print(f"TensorBoard: tensorboard --logdir {log_dir.parent} (run {run}, tab IMAGES, tags inspect/...)")


def show_probes(model, tokenizer, args: argparse.Namespace, ablate: dict) -> None:
    from data.probes import align, load_probes

    aligned = []
    for probe in load_probes(args.probes):
        try:
            aligned.append(align(probe, tokenizer))
        except UserError as exc:
            raise UserError(f"{args.probes} line {probe.line}: {exc}") from None
        if len(aligned[-1].ids) > model.config.block_size:
            raise UserError(f"{args.probes} line {probe.line}: the probe has {len(aligned[-1].ids)} tokens but the "
                            f"model's block_size is {model.config.block_size}; shorten its text, or remove it")
    report = evaluate_probes(model, aligned, ablate or None)
    baseline = evaluate_probes(model, aligned) if ablate else report
    if args.json:
        out = report.to_dict()
        if ablate:
            out["continuation_accuracy_without_ablation"] = baseline.continuation_accuracy
        print(json.dumps(out))
        return
    title = f"heads on {len(aligned)} probes from {args.probes}"
    if ablate:
        title += f", with {', '.join(ablation_names(ablate))} ablated"
    print(title + ":")
    print(head_table(report))
    if ablate and baseline.continuation_accuracy is not None:
        print(ablation_line(baseline.continuation_accuracy, report.continuation_accuracy, ablation_names(ablate)))
