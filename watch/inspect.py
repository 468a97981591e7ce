"""Looking inside a checkpoint, for `sample.py`: `--attention` (heatmaps, or with `--html` an offline
attention page), `--probes` (the pronoun head table), `--heads` (what kind of head each head
became, against the untrained model, and what removing them costs) and `--patch` (which heads carry
a prompt's next token: activation patching, direct logit attribution and the logit lens)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from common.cli import progress, say, working
from common.errors import UsageError, UserError, warn
from common.files import inside_name, read_text, write_files
from common.parsing import NotParsed, is_whole_number, parse_int, quoted
from data.corpora import corpus_of
from data.prepare import find_prepared
from data.probes import Probe
from watch.measure.capture import capture_attention
from watch.measure.composition import composition_json
from watch.measure.heads import Ablation, ablation_names, default_query, display_token, head_name
from watch.measure.headtypes import BROAD, TYPE_SETS, TYPES, types_not_measurable
from watch.measure.patching import (
    MIN_GAP,
    analyse,
    mean_json,
    mean_over,
    pair_for,
    pairs_from_file,
    patching_json,
    runs,
)
from watch.measure.paths import path_patching, worth_reading
from watch.measure.probesets import NO_TEXT, PRONOUN, REPEATED, REPEATED_MIN_LENGTH, TEXT, ProbeSets, from_file
from watch.measure.pronouns import finite
from watch.measure.proofs import head_means, proofs
from watch.measure.reading import PROBE_KINDS, Materials, Reading, read_pass, untrained_like, watch_sets
from watch.show.circuit import circuit_image
from watch.show.heatmaps import (
    PNG,
    HeatmapCanvas,
    head_titles,
    patching_map,
    png_of,
    sentence_slug,
    sentence_tag,
)
from watch.show.kinds import paths_lines, shown
from watch.show.page import SentenceView, reading_page, write_page
from watch.show.report import (
    ablation_line,
    composition_lines,
    head_table,
    mean_report,
    measured_on,
    patching_report,
    top_attended,
    type_labels,
    type_report,
)
from watch.show.tensorboard import TensorBoardWriter, tensorboard_command


def _query_position(tokens: list[str], query: str | None) -> int:
    """--query as a position or a word; by default the last pronoun, else the last token."""
    if query is None:
        return default_query(tokens)
    if is_whole_number(query):  # a position; other digits ('²') make a word
        try:
            pos = parse_int(query)
        except NotParsed:
            pos = len(tokens)  # beyond the tokens, however many digits it has
        pos = pos + len(tokens) if pos < 0 else pos
        if not 0 <= pos < len(tokens):
            raise UsageError(f"--query {quoted(query)} is outside the {len(tokens)} tokens; give 0..{len(tokens) - 1}")
        return pos
    words = [t.strip().lower() for t in tokens]
    matches = [i for i, w in enumerate(words) if w == query.strip().lower()]
    if not matches:
        raise UsageError(
            f"--query {query!r} is not a token of the text; tokens are: {', '.join(repr(t) for t in tokens)}"
        )
    return matches[-1]


def show_attention(model, tokenizer, checkpoint: dict, args: argparse.Namespace, ablate: Ablation | None) -> None:
    text = args.attention
    if not text:
        raise UsageError('--attention needs a non-empty text, e.g. --attention "The dog saw the ball and it"')
    ids = tokenizer.encode(text)
    tokens = tokenizer.token_strings(ids)
    if len(ids) > model.config.block_size:
        raise UsageError(
            f"the text has {len(ids)} tokens, more than the model's block_size {model.config.block_size}; shorten it"
        )
    patterns = capture_attention(model, [ids], ablate)[0]
    query = _query_position(tokens, args.query)
    view = SentenceView(text, tokens, patterns, query=query)  # its head to mark: the most focused from the query
    layer, head = view.best
    written: list[str] = []
    if args.html:
        step = f" at step {checkpoint['step']}" if "step" in checkpoint else ""
        ablated = f", with {', '.join(ablation_names(ablate))} ablated" if ablate else ""
        with working(f"reading {args.out_dir} for the page"):  # on a large model, a minute or more
            sets = checkpoint_sets(model, tokenizer, checkpoint, None)
            reading = checkpoint_reading(model, sets, checkpoint)
            page = reading_page([view], f"Attention of {args.out_dir}{step}{ablated}", reading, model, sets, tokenizer)
        page = write_page(args.html, page)
        written.append(f"attention page: {page} (open it in a browser; it needs no network)")
    if args.png_dir is not None:
        written += _write_heatmaps(checkpoint, args, view, sorted(ablation_names(ablate)))  # by name, as files are
    if args.json:
        weights = [[[[round(float(w), 6) for w in row] for row in h] for h in p.tolist()] for p in patterns]
        out = {
            "text": text,
            "tokens": tokens,
            "query_pos": query,
            "focused_head": head_name(layer, head),
            "ablated": ablation_names(ablate),
            "patterns": weights,  # [layer][head][query_pos][key_pos]
        }
        print(json.dumps(finite(out), allow_nan=False))
        say(*written, file=sys.stderr)  # stdout holds the JSON alone
        return
    say("tokens: " + " | ".join(display_token(t, space_mark="") for t in tokens))
    say(f"where {tokens[query].strip()!r} (position {query}) looks, top 3 per head:")
    for n, pattern in enumerate(patterns):
        say(*top_attended(pattern, tokens, query, k=3, layer=n).splitlines())
    say(f"most focused head: {head_name(layer, head)}", *written)


def _write_heatmaps(checkpoint: dict, args: argparse.Namespace, view: SentenceView, removed: list[str]) -> list[str]:
    """PNGs of every layer of the sentence's `view` and of its most focused head in --png_dir, named for all that makes
    them differ: the sentence, the heads `removed` (in the order of their names) and the query. They
    are also added to the checkpoint's TensorBoard run, under inspect/ and a tag of the same parts, when that run's
    folder is here. Both its parts come from the checkpoint, so nothing else is written: no folder is made, and a run
    name that would lead outside its log_dir ('..', an absolute path) is not followed. Returns the lines saying where
    they went."""
    png_dir = Path(args.png_dir)
    without = f", without {', '.join(removed)}" if removed else ""
    # The hash in the slug tells every set of heads apart; the words, cut short, say which to a reader.
    slug = sentence_slug(args.attention, *removed) + (f"_without_{'_'.join(removed)}"[:60] if removed else "")
    tokens, patterns, query, name = view.tokens, view.patterns, view.query, head_name(*view.best)
    layers = HeatmapCanvas(tokens, len(patterns[0]))  # every layer has as many heads: one canvas draws them all
    images = {
        f"layer{n}": layers.draw(list(p), head_titles(n, len(p)), f"layer {n}{without}") for n, p in enumerate(patterns)
    }
    images[f"{name}_query{query}"] = HeatmapCanvas(tokens, 1, highlight_query=query).draw(
        [patterns[view.best[0]][view.best[1]]], [f"{name}: most focused head for {tokens[query].strip()!r}{without}"]
    )
    files = {png_dir / f"{slug}_{part}.png": png_of(image) for part, image in images.items()}
    written = [f"heatmaps: {png_dir}/{slug}_*.png"]
    write_files(files, PNG, f"the heatmaps to {png_dir}", "--png_dir")
    config = checkpoint.get("train_config")
    run = checkpoint.get("run_name")
    root = config.get("log_dir", "runs") if isinstance(config, dict) else None
    if not isinstance(run, str) or not run or not isinstance(root, str):
        return written
    if inside_name(run) is not None:
        warn(
            f"the heatmaps are not added to TensorBoard: the checkpoint's run name {run!r} {inside_name(run)}, "
            f"so it would lead outside its log_dir; they are in the PNG files"
        )
        return written
    log_dir = Path(root) / run
    if not log_dir.is_dir():  # the run's logs are not here (another machine, or removed): nothing to add to
        return written
    writer = TensorBoardWriter(log_dir, fix="the heatmaps are in the PNG files")
    tag = f"inspect/{sentence_tag(args.attention)}" + (f" without {' '.join(removed)}" if removed else "")
    for part, image in images.items():
        writer.add_image(f"{tag}/{part}", image, checkpoint.get("step", 0), dataformats="HWC")
    writer.close()
    if not writer.failed:  # a shell comment after the command, so the whole line runs as printed
        written.append(f"TensorBoard: {tensorboard_command(log_dir)}  # tab IMAGES, tags inspect/...")
    return written


def show_probes(model, tokenizer, _checkpoint: dict, args: argparse.Namespace, ablate: Ablation | None) -> None:
    sets = ProbeSets({PRONOUN: from_file(PRONOUN, Probe, args.probes, tokenizer, model.config.block_size, strict=True)})
    passes = [ablate, None] if ablate else [None]  # with heads removed, then (for the change) without
    read = [read_pass(model, sets, ablate=heads).pronouns for heads in progress(passes, f"reading {args.probes}")]
    report, baseline = read[0], read[-1]
    if report is None:
        raise UserError(f"{args.probes} holds no probe this model can score; check its words against the vocabulary")
    if args.json:
        out = report.to_dict()
        if ablate:
            out["continuation_accuracy_without_ablation"] = baseline.continuation_accuracy
        print(json.dumps(finite(out), allow_nan=False))  # valid JSON: null where a number is nan
        return
    ablated = f", with {', '.join(ablation_names(ablate))} ablated" if ablate else ""
    say(f"heads on {report.n_probes} probes from {args.probes}{ablated}:")
    say(*head_table(report).splitlines())
    if ablate and baseline.continuation_accuracy is not None:
        n = report.continuation.n
        say(ablation_line(baseline.continuation_accuracy, report.continuation_accuracy, ablation_names(ablate), n))


# --- head types -----------------------------------------------------------------------------------


def checkpoint_reading(
    model, sets: ProbeSets, checkpoint: dict, ablate: Ablation | None = None, kinds: tuple[str, ...] | None = None
) -> Reading:
    """`model` (`ablate`'s heads removed) read on `sets` (only `kinds`, if given) against the untrained model its run
    started from (built from the run's seed: 1337, the default, when it records none), with the composition of both."""
    config = checkpoint.get("train_config")
    seed = config.get("seed") if isinstance(config, dict) else None
    untrained = untrained_like(model, seed if type(seed) is int else 1337)
    baseline = read_pass(untrained, sets, kinds=TYPE_SETS, compose=True)
    return read_pass(model, sets, untrained=baseline, ablate=ablate, kinds=kinds, compose=True)


def checkpoint_sets(model, tokenizer, checkpoint: dict, text_file: str | None, draw: int = 0) -> ProbeSets:
    """The probe sets a checkpoint is scored on: repeated random tokens (of draw number `draw`); held-out text from
    `text_file`, else from the val split of the run's prepared data when it is still on disk; and the pronoun probes
    the run was watched on, when they are still here (the config's own file, the generated corpus's or the named
    corpus's)."""
    config = checkpoint.get("train_config") if isinstance(checkpoint.get("train_config"), dict) else {}
    settings = (checkpoint.get("data") if isinstance(checkpoint.get("data"), dict) else None) or config
    prepared = find_prepared(settings, tokenizer.to_meta())
    text, source = None, None
    if text_file is not None:
        content = read_text(text_file, "text file", "give --text the path of a UTF-8 text file")
        try:
            text, source = tokenizer.encode(content), str(text_file)
        except UserError as exc:
            raise UserError(f"--text {text_file}: {exc}") from None
    elif prepared is not None:
        text, source = prepared.tokens("val"), f"the val split of {prepared.meta.get('source', prepared.folder)}"
    given = config.get("probes")
    corpus = corpus_of(config["dataset"]) if isinstance(config.get("dataset"), str) else None
    candidates = (
        Path(given) if isinstance(given, str) and given else None,
        prepared.probes_path if prepared is not None else None,
        corpus.probes_path if corpus else None,
    )
    probes = next((path for path in candidates if path is not None and path.is_file()), None)
    sets = watch_sets(
        Materials(
            tokenizer,
            model.config.block_size,
            train_tokens=prepared.tokens("train") if prepared is not None else None,
            text=text,
            text_source=source or "the val split",
            files={PRONOUN: probes},
            corpus=config.get("dataset") if isinstance(config.get("dataset"), str) else None,
            draw=draw,
            paths=worth_reading(model),
        )
    )
    if text is None and not settings and "imported" in checkpoint:  # trained elsewhere: no run, so no val split
        sets.add(
            TEXT,
            "no held-out text: a model trained elsewhere brings no val split; give --text FILE (any "
            "UTF-8 text) for the previous-token, sink, current-token, positional and broad scores and the "
            "in-context score",
        )
    return sets


def show_heads(model, tokenizer, checkpoint: dict, args: argparse.Namespace, ablate: Ablation | None) -> None:
    """The head-type table, the untrained model's beside it, and (without --ablate) what removing each
    typed head costs; with --ablate, the same figures with those heads removed."""
    sets = checkpoint_sets(model, tokenizer, checkpoint, args.text)
    if args.ablation == "mean" and sets.get(TEXT) is None:
        why = sets.missing.get(TEXT, NO_TEXT)
        if why == NO_TEXT:
            raise UsageError(
                "--ablation=mean replaces a head by its mean output over held-out text, and there is "
                "none here; give --text FILE, or use --ablation=zero"
            )
        # There is text, and it cannot be used: say why (too short, or this model's block_size too small).
        longer = "" if model.config.block_size < REPEATED_MIN_LENGTH else " or a longer --text FILE"
        raise UsageError(
            f"--ablation=mean replaces a head by its mean output over held-out text, and there is "
            f"none: {why}; use --ablation=zero{longer}"
        )
    if ablate and args.ablation == "mean":
        ablate = Ablation(ablate.heads, head_means(model, sets.get(TEXT)))
    with working(f"measuring the heads of {args.out_dir}"):  # on a large model, many passes
        reading = checkpoint_reading(model, sets, checkpoint, ablate)  # the composition: of the weights, as they are
        found = proofs(model, sets, reading, args.ablation) if not ablate else []
    if args.json:
        print(json.dumps(heads_json(reading, found, args.ablation, sets), allow_nan=False))
        return
    removed = f", with {', '.join(reading.results.ablated)} removed ({args.ablation}-ablation)" if ablate else ""
    if types_not_measurable(sets) is not None:  # a header and an empty table would say nothing
        say(f"{args.out_dir}{removed}: {types_not_measurable(sets)}")
    else:
        say(f"head types of {args.out_dir}{removed} ({measured_on(sets)}); the untrained model's scores in brackets:")
        say(*type_report(reading, found).splitlines())  # its lines name the text read, a path we did not write
    say(*composition_lines(reading).splitlines())


def heads_json(reading: Reading, found: list, mode: str, sets: ProbeSets) -> dict:
    """What `show_heads` prints, composition included, as one JSON object (None where a score was not measured)."""
    results, untrained = reading.results, reading.untrained
    numbers = sorted(name for kind in PROBE_KINDS.values() for name in kind.numbers)  # the model's, by name
    # A head's scores: those of the types that have one of their own, `broad`, then those read from others.
    own = [kind for kind, head_type in TYPES.items() if head_type.read is None]
    read = [kind for kind, head_type in TYPES.items() if head_type.read is not None]
    spread = [kind for kind in own if f"{kind}_spread" in results.heads]

    def scores_of(r: Reading, layer: int, head: int) -> dict:
        out = {kind: r.results.head(kind, layer, head) for kind in (*own, BROAD)}
        out.update({kind: float(r.type_scores[kind][layer, head]) if kind in r.type_scores else None for kind in read})
        # beside each score read from random sequences, its spread (two standard errors over the sequences)
        out.update({f"{kind}_spread": r.results.head(f"{kind}_spread", layer, head) for kind in spread})
        reach, spreads = r.reach.get(head_name(layer, head), {}), r.results.reach("_spread").get(head_name(layer, head))
        out["induction_by_distance"] = {str(distance): value for distance, value in reach.items()}
        out["induction_by_distance_spread"] = {str(distance): value for distance, value in (spreads or {}).items()}
        return out

    heads = {}
    for name, head_type in reading.types.items():
        layer, head = head_type.layer, head_type.head
        heads[name] = {
            **scores_of(reading, layer, head),
            "positional_offset": int(reading.offsets[layer, head]) if reading.offsets is not None else None,
            "type": head_type.kind,
            "type_label": TYPES[head_type.kind].label if head_type.kind else None,
            # activation patching on the watch's pairs: the share of the answer it carries, its direct attribution
            **{key: results.head(key, layer, head) for key in ("patching", "patching_spread", "attribution")},
            "untrained": scores_of(untrained, layer, head),
        }
    out = {
        "heads": heads,
        **{n: shown(results.numbers).get(n) for n in numbers},  # the in-context score as nats saved, as every view
        "untrained": {n: shown(untrained.results.numbers).get(n) for n in numbers},
        "ablated": results.ablated,
        "ablation": mode,
        "probe_sets": {kind: s.about for kind, s in sets.sets.items()},
        "paths": [asdict(path) for path in results.paths],  # which head feeds which, as `--patch --paths` gives them
        "draw_rule": sets.get(REPEATED).draw_rule if sets.get(REPEATED) is not None else None,
        "not_measured": dict(sets.missing),
        "ablations": [
            {
                "heads": p.heads,
                "chosen_as": p.kind,
                **{n: shown(p.reading.results.numbers).get(n) for n in numbers},
                "best_induction": (p.reading.results.best("induction") or (None, None))[1],
                "best_induction_spread": p.reading.results.best_spread("induction"),
            }
            for p in found
        ],
        **composition_json(reading.composition, untrained.composition),
    }
    return finite(out)


# --- activation patching ---------------------------------------------------------------------------------------


def show_patch(model, tokenizer, checkpoint: dict, args: argparse.Namespace, _ablate: Ablation | None) -> None:
    """Which heads carry a clean prompt's next token against a corrupted one's (`--patch CLEAN CORRUPTED`), or each
    pair of a JSONL file's (`--patch FILE.jsonl`): the report and a heatmap per pair, or with --json one object."""
    if len(args.patch) == 2:
        pairs = [pair_for(model, tokenizer, *args.patch, args.answer, args.wrong)]
    else:
        if args.answer is not None or args.wrong is not None:
            raise UsageError("--answer and --wrong go with --patch CLEAN CORRUPTED; a pairs file gives each pair's own")
        if not Path(args.patch[0]).exists():  # most likely a prompt whose twin was left out
            raise UsageError(
                f"--patch {args.patch[0]!r} is one prompt and no file; give two prompts, --patch CLEAN CORRUPTED, or "
                f"the path of a JSONL file of pairs"
            )
        pairs = pairs_from_file(model, tokenizer, args.patch[0])
    what = f"patching {len(pairs):,} pairs" if len(pairs) > 1 else "patching the pair"
    found = [analyse(model, pair) for pair in progress(pairs, what)]
    if len(found) == 1 and not found[0].measured:  # one pair, and nothing for a part to carry
        f, answer = found[0], tokenizer.decode([found[0].pair.answer])
        raise UserError(
            f"the model prefers {answer!r} over {tokenizer.decode([f.pair.wrong])!r} by {f.clean_diff:+.4f} logits "
            f"after the clean prompt and {f.corrupted_diff:+.4f} after the corrupted one: that is not a difference "
            f"of at least {MIN_GAP} logits for a part of the model to carry; choose prompts whose next words the "
            f"model tells apart, or --answer and --wrong it tells apart"
        )
    found_paths = None
    if args.paths:  # every pair together, as the watch reads them
        with working(f"path patching {len(pairs):,} pair{'s' if len(pairs) > 1 else ''}"):
            found_paths = path_patching(model, runs(model, pairs))
    graph = _circuit(model, tokenizer, checkpoint, pairs, found_paths) if args.png_dir is not None else None
    maps, drawn = _write_patching_maps(found, tokenizer, args.png_dir, graph)
    if args.json:
        shown = [f"heatmap: {path}" for path in maps if path is not None] + ([f"graph: {drawn}"] if drawn else [])
        say(*shown, file=sys.stderr)  # stdout holds the JSON alone
        objects = [finite(patching_json(f, tokenizer)) for f in found]
        out = objects[0] if len(args.patch) == 2 else {"pairs": objects, "mean": mean_json(mean_over(found))}
        if found_paths is not None:
            out["paths"] = [asdict(path) for path in found_paths]
        print(json.dumps(finite(out), allow_nan=False))
        return
    for n, (f, path) in enumerate(zip(found, maps, strict=True)):
        tokens = tokenizer.token_strings(f.pair.clean)
        answer, wrong = tokenizer.decode([f.pair.answer]), tokenizer.decode([f.pair.wrong])
        if n:
            say("")
        say(f"clean:     {tokenizer.decode(f.pair.clean)!r} -> {answer!r}")
        say(f"corrupted: {tokenizer.decode(f.pair.corrupted)!r} -> {wrong!r}")
        say(*patching_report(f, tokens, answer, wrong).splitlines())
        if path is not None:  # a pair the model does not tell apart has no map
            say(f"heatmap: {path}")
    if len(found) > 1:
        say("", *mean_report(mean_over(found)).splitlines())
    if found_paths is not None:
        say("", *paths_lines(found_paths, f"the {len(pairs)} pairs" if len(pairs) > 1 else "the pair"))
        if drawn is not None:
            say(f"graph: {drawn}")


def _circuit(model, tokenizer, checkpoint: dict, pairs: list, found: list | None):
    """The graph of the paths `found` on `pairs` (None without them), its heads labelled with their types."""
    if found is None:
        return None
    with working("reading the heads' types for the graph"):
        sets = checkpoint_sets(model, tokenizer, checkpoint, None)
        labels = type_labels(checkpoint_reading(model, sets, checkpoint, kinds=TYPE_SETS))  # the types alone
    title = f"which head feeds which on {len(pairs)} pair{'s' if len(pairs) > 1 else ''} (path patching)"
    return circuit_image(found, model.config.n_layer, model.config.n_head, labels, title)


def _write_patching_maps(found: list, tokenizer, png_dir: str | None, graph=None) -> tuple[list, Path | None]:
    """Each measured pair's patching map (`patching_map`) as a PNG in `png_dir`, named for all of the pair (its prompts
    and answers), and the paths' `graph` beside the first pair's: their paths, in the pairs' order (None for a pair not
    measured, and none without `png_dir`). Each map is drawn as it is written."""
    if png_dir is None:
        return [None] * len(found), None
    paths, files = [], {}
    for f in found:
        tokens = tokenizer.token_strings(f.pair.clean)
        name = sentence_slug("".join(tokens), f.pair.corrupted, f.pair.answer, f.pair.wrong)
        paths.append(Path(png_dir) / f"{name}.png" if f.measured else None)
        if f.measured:
            files[paths[-1]] = lambda fh, f=f, tokens=tokens: png_of(patching_map(f, tokens))(fh)
    first = found[0].pair
    drawn = Path(png_dir) / f"{sentence_slug(tokenizer.decode(first.clean), len(found), 'paths')}_paths.png"
    if graph is not None:
        files[drawn] = png_of(graph)
    write_files(files, PNG, f"the patching maps to {png_dir}", "--png_dir")
    return paths, drawn if graph is not None else None
