"""Where does a checkpoint resolve gendered pronouns? Every head at two positions, behaviour, ablation.

    python tools/pronoun_study.py CKPT [CKPT ...] [--probes FILE] [--heldout FILE] [--agreement FILE]
        [--ablate L1H2+L2H0 ...] [--residual] [--init_seeds N] [--brief] [--json FILE] [--log_dir DIR]

On two-person probes ("lily played with tom, and he laughed") every head is scored at two
query positions:

- the pronoun ("he"), the target: a head that resolves it weighs the referent ("tom") above the
  distractor ("lily");
- the position that predicts the pronoun (the token before it): the model cannot know there which
  pronoun comes, so on these balanced probes every head is at exactly 50% top-1, but a head that
  reads the names' gender for the prediction shows up as weight on both.

The held-out frame family is scored with the heads chosen on the main probes. Then the
agreement report of `watch.measure.pronouns` (single-person contexts, name-reading heads, ablations),
plus the ablation of the head table's best head and of any `--ablate` set, and object choice:
after "..., and she hugged", does the model name the other person rather than the referent?
`--residual` adds linear read-outs of the residual stream, layer by layer (below).

`--init_seeds N` scores untrained models of the same config (seeds 0..N-1, and the run's own
seed, which gives the run's own initial weights). Picking the best of many heads is a test
repeated many times: in an untrained model the most selective head can sit well above 50%
because random query and key vectors favour some names after "she" and others after "he".
That is the chance level of "the best head's top-1", and the run's own initialisation shows
whether a head learned its preference or started with it.

Probe files default to the ones of the checkpoint's corpus (`data.corpora`), the held-out file
beside them as NAME-heldout.jsonl. Several checkpoints (e.g. out/RUN/ckpt-*.pt) give one summary
line each: how the heads emerge over training. `--log_dir DIR` logs each checkpoint's scores to
TensorBoard at its step, with the same tags a training run logs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from common.cli import run_cli  # noqa: E402
from common.errors import UsageError, UserError
from common.parsing import (
    NotParsed,
    parse_json,  # noqa: E402
)
from data.corpora import corpus_of  # noqa: E402
from data.probes import AgreementProbe, AlignedProbe, Probe  # noqa: E402
from data.tokenizer import Tokenizer, TokenizerError  # noqa: E402
from formats import load_model  # noqa: E402
from model.gpt import evaluating  # noqa: E402
from watch.measure.capture import captures  # noqa: E402
from watch.measure.probesets import AGREEMENT, PRONOUN, ProbeSet, ProbeSets, from_file  # noqa: E402
from watch.measure.pronouns import AgreementStats, HeadStats, ProbeReport, baselines  # noqa: E402
from watch.measure.proofs import AblationResult, ablated, agreement_ablations  # noqa: E402
from watch.measure.reading import Reading, read_pass, untrained_like  # noqa: E402
from watch.show.report import agreement_lines, head_table  # noqa: E402

# --- inputs ------------------------------------------------------------------------------------------


def probe_files(checkpoint: dict, args: argparse.Namespace) -> tuple[Path, Path | None, Path | None]:
    """(two-person probes, held-out probes, agreement contexts): as given, else the corpus's own."""
    dataset = str((checkpoint.get("train_config") or {}).get("dataset", ""))
    corpus = corpus_of(dataset)
    probes = args.probes or (corpus.probes_path if corpus else None)
    if probes is None:
        raise UsageError(
            f"the checkpoint's corpus {dataset!r} has no probe files of its own; give --probes (and --agreement)"
        )
    heldout = args.heldout or probes.with_name(probes.stem + "-heldout.jsonl")
    agreement = args.agreement or (corpus.agreement_path if corpus else None)
    return probes, heldout if heldout.exists() else None, agreement


def probe_meta(path: Path, aligned: list[AlignedProbe]) -> list[dict]:
    """Each probe's row of PATH.meta.json (family, frame, referent gender), when the file has one."""
    meta_path = path.with_suffix(".meta.json")
    try:
        meta = parse_json(meta_path.read_bytes()) if meta_path.exists() else {}
    except NotParsed as exc:
        raise UserError(f"{meta_path} is not valid JSON ({exc}); regenerate it with tools/gender_probes.py") from None
    rows = meta.get("probes", []) if isinstance(meta, dict) else []
    by_line = dict(enumerate(rows, start=1))
    return [by_line.get(item.probe.line, {}) for item in aligned]


def predicting(item: AlignedProbe, tokenizer: Tokenizer) -> AlignedProbe:
    """The probe read at the token before the pronoun's first token: where the pronoun is predicted."""
    _, spans = tokenizer.encode_with_offsets(item.probe.text)
    start, end = item.probe.span("pronoun")
    first = min(i for i, (s, e) in enumerate(spans) if s < end and e > start)
    return replace(item, pronoun_pos=first - 1)


def pronoun_set(items: list[AlignedProbe]) -> ProbeSets:
    return ProbeSets(
        {PRONOUN: ProbeSet(PRONOUN, [i.ids for i in items], list(items), logits_at=[i.continuation_pos for i in items])}
    )


def report_on(model, items: list[AlignedProbe]) -> ProbeReport:
    """The pronoun head table of `items` (their `pronoun_pos` is the query row read)."""
    return read_pass(model, pronoun_set(items)).pronouns


@dataclass
class Agreement:
    """Agreement on the single-person contexts, and what removing its heads costs."""

    reading: Reading
    ablations: list[AblationResult]

    @property
    def stats(self) -> AgreementStats:
        return self.reading.agreement


# --- object choice -----------------------------------------------------------------------------------

OBJECT_TAILS = (" gave the ball to", " said hello to", " smiled at", " hugged")


def object_items(aligned: list[AlignedProbe], tokenizer: Tokenizer) -> list[dict]:
    """Probes cut after the pronoun and continued with a verb that takes the other person ("..., and she
    hugged"): a model that resolved the pronoun prefers the other person's name next. Probes naming a
    person with a noun ("the girl") are left out."""
    items = []
    for item in aligned:
        p = item.probe
        if any(p.text[max(0, off - 4) : off].lower() == "the " for off in (p.referent_offset, p.distractor_offset)):
            continue
        for tail in OBJECT_TAILS:
            context = p.text[: p.pronoun_offset + len(p.pronoun)] + tail
            try:
                ids = tokenizer.encode(context)
                other = tokenizer.encode(context + " " + p.distractor)
                same = tokenizer.encode(context + " " + p.referent)
            except TokenizerError:
                continue
            n = len(ids)
            if other[:n] == ids and same[:n] == ids and other[n] != same[n]:
                items.append({"ids": ids, "continuation_pos": n - 1, "probe": p, "other": other[n], "same": same[n]})
    return items


def object_choice(model, items: list[dict], removed: AblationResult | None = None) -> float | None:
    """Share of object items where the other person's first token outscores the referent's (with `removed`'s
    heads removed)."""
    if not items:
        return None
    objects = ProbeSet(
        "objects", [item["ids"] for item in items], items, logits_at=[item["continuation_pos"] for item in items]
    )
    wins = 0
    for capture in captures(model, objects, removed.ablation if removed is not None else None):
        wins += sum(
            bool(row[it["other"]] > row[it["same"]]) for it, row in zip(capture.items, capture.logits, strict=True)
        )
    return wins / len(items)


# --- residual read-outs ------------------------------------------------------------------------------


def residuals(model, ids_list: list[list[int]]) -> list[torch.Tensor]:
    """Per sentence, [n_layer + 1, T, d]: the embeddings, then each block's output."""
    out = []
    with evaluating(model):
        for ids in ids_list:
            x = model._embed(torch.tensor([ids], dtype=torch.long))
            states = [x[0]]
            for block in model.blocks:
                x = block(x)
                states.append(x[0])
            out.append(torch.stack(states).float())
    return out


def ridge_accuracy(x: torch.Tensor, y: torch.Tensor, folds: list[int], alpha: float = 1.0) -> float:
    """Cross-validated accuracy of a ridge classifier (targets ±1, standardised features)."""
    correct = total = 0
    for fold in sorted(set(folds)):
        test = torch.tensor([f == fold for f in folds])
        if (~test).sum() < 4 or not test.any():
            continue
        mean, std = x[~test].mean(0), x[~test].std(0).clamp_min(1e-6)
        a, b = ((x[~test] - mean) / std).double(), ((x[test] - mean) / std).double()
        t = y[~test].double() * 2 - 1
        w = torch.linalg.solve(a.T @ a + alpha * len(a) * torch.eye(a.shape[1], dtype=torch.float64), a.T @ t)
        bias = t.mean() - (a @ w).mean()
        correct += int(((b @ w + bias > 0) == y[test].bool()).sum())
        total += int(test.sum())
    return correct / total if total else float("nan")


def folds_of(keys: list, k: int = 5, seed: int = 0) -> list[int]:
    """A fold per key, so that all items sharing a key (a person, a group) are held out together."""
    unique = sorted(set(map(str, keys)))
    random.Random(seed).shuffle(unique)
    index = {key: i % k for i, key in enumerate(unique)}
    return [index[str(key)] for key in keys]


def residual_study(
    model, aligned: list[AlignedProbe], pred: list[AlignedProbe], meta: list[dict], contexts: list
) -> dict[str, list[float]]:
    """Linear read-outs, layer by layer (0 = embeddings), each scored on held-out people or groups:

    - name_gender: at a person's last token, is the person female? (folds: people)
    - resolution_at_pronoun: at the pronoun, is the referent the first person? Neither the
      pronoun nor the name order says alone (each is right half the time here), so above 50%
      means the model has resolved the pronoun by that layer. (folds: probe groups)
    - resolution_at_predicting: the same one token earlier (50% expected: the pronoun is unknown).
    - upcoming_pronoun: at the end of an agreement context, will it be "she"? (folds: frames)
    """
    states = residuals(model, [item.ids for item in aligned])
    layers = range(states[0].shape[0])
    rows, female, people = [], [], []
    for item, st in zip(aligned, states, strict=True):
        she = item.probe.pronoun.lower() == "she"
        for positions, word, is_referent in (
            (item.referent_positions, item.probe.referent, True),
            (item.distractor_positions, item.probe.distractor, False),
        ):
            rows.append(st[:, positions[-1]])
            female.append(she == is_referent)
            people.append(word.lower())
    x, y, folds = torch.stack(rows), torch.tensor(female), folds_of(people)
    out = {"name_gender": [ridge_accuracy(x[:, n], y, folds) for n in layers]}
    groups = folds_of([m.get("group", i // 4) for i, m in enumerate(meta)])
    first = torch.tensor([min(i.referent_positions) < min(i.distractor_positions) for i in aligned])
    for name, items in (("resolution_at_pronoun", aligned), ("resolution_at_predicting", pred)):
        at = torch.stack([st[:, item.pronoun_pos] for st, item in zip(states, items, strict=True)])
        out[name] = [ridge_accuracy(at[:, n], first, groups) for n in layers]
    if contexts:
        ends = torch.stack([s[:, -1] for s in residuals(model, [c.ids for c in contexts])])
        she = torch.tensor([c.probe.pronoun.lower() == "she" for c in contexts])
        frames = folds_of([(c.probe.mention, c.probe.frame) for c in contexts])
        out["upcoming_pronoun"] = [ridge_accuracy(ends[:, n], she, frames) for n in layers]
    return out


# --- one checkpoint ----------------------------------------------------------------------------------


def by_group(model, aligned: list[AlignedProbe], meta: list[dict], head: HeadStats, key: str) -> dict[str, float]:
    """The head's top-1 within each value of `key` in the probes' metadata."""
    groups: dict[str, list[AlignedProbe]] = {}
    for item, info in zip(aligned, meta, strict=True):
        groups.setdefault(str(info.get(key, "all")), []).append(item)
    return {k: report_on(model, items).heads[head.name].top1 for k, items in sorted(groups.items())}


_AT_INIT: dict[tuple, dict[str, HeadStats]] = {}


def heads_at_init(model, seed: int, aligned: list[AlignedProbe]) -> dict[str, HeadStats]:
    """Every head's scores in an untrained model of this config, initialised as a run with `seed` is
    (train.py seeds torch, then builds the model)."""
    key = (json.dumps(model.config.to_dict(), sort_keys=True), seed, tuple(tuple(item.ids) for item in aligned))
    if key not in _AT_INIT:
        _AT_INIT[key] = report_on(untrained_like(model, seed), aligned).heads
    return _AT_INIT[key]


def study(
    model,
    tokenizer: Tokenizer,
    files: tuple[Path, Path | None, Path | None],
    extra: list[list[str]],
    residual: bool,
    init_seeds: list[int],
    run_seed: int,
) -> dict:
    block = model.config.block_size
    probes_path, heldout_path, agreement_path = files
    sets = ProbeSets()
    sets.add(PRONOUN, from_file(PRONOUN, Probe, probes_path, tokenizer, block))
    aligned = sets.get(PRONOUN).items
    if not aligned:
        raise UserError(
            f"no probe in {probes_path} fits this checkpoint's vocabulary and block_size; use the probe "
            f"files made from its corpus (lower-case probes for a lower-case corpus)"
        )
    if agreement_path:
        sets.add(AGREEMENT, from_file(AGREEMENT, AgreementProbe, agreement_path, tokenizer, block))
    meta = probe_meta(probes_path, aligned)
    pred = [predicting(item, tokenizer) for item in aligned]
    reading = read_pass(model, sets)
    at_pronoun = reading.pronouns
    at_predicting = report_on(model, pred)
    best = at_pronoun.best
    selective = at_pronoun.most_selective
    contexts = sets.get(AGREEMENT).items if sets.get(AGREEMENT) is not None else []
    agreement = Agreement(reading, agreement_ablations(model, sets, reading)) if contexts else None
    objects = object_items(aligned, tokenizer)
    result = {
        "probes": str(probes_path),
        "n_probes": len(aligned),
        "baselines": baselines(aligned),
        "at_pronoun": at_pronoun,
        "at_predicting": at_predicting,
        "best": best,
        "selective": selective,
        "agreement": agreement,
        "selective_by_family": by_group(model, aligned, meta, selective, "family"),
        "selective_by_gender": by_group(model, aligned, meta, selective, "referent_gender"),
        "object_choice": {"n": len(objects), "accuracy": object_choice(model, objects)},
        "_reading": reading,
    }
    if heldout_path is not None:
        held = from_file(PRONOUN, Probe, heldout_path, tokenizer, block).items
        stats = report_on(model, held)
        result["heldout"] = {
            "n_probes": len(held),
            "baselines": baselines(held),
            "best": stats.heads[best.name],
            "selective": stats.heads[selective.name],
            "own_selective": stats.most_selective,
        }
    result["more_ablations"], result["object_ablated"] = [], {}
    if agreement is not None:
        done = {tuple(ab.heads) for ab in agreement.ablations}
        chosen = [("best", [best.name]), *(("requested", sorted(heads)) for heads in extra)]
        result["more_ablations"] = [
            ablated(model, sets, heads, label, label, kinds=(PRONOUN, AGREEMENT))
            for label, heads in chosen
            if tuple(heads) not in done
        ]
        result["object_ablated"] = {
            ab.kind: object_choice(model, objects, ab) for ab in [*agreement.ablations, *result["more_ablations"]]
        }
    if residual:
        result["residual"] = residual_study(model, aligned, pred, meta, contexts)
    if init_seeds:
        own = heads_at_init(model, run_seed, aligned)
        result["init"] = {
            "seed": run_seed,
            "same_head": own[selective.name],
            "selective": min(own.values(), key=lambda s: (-s.top1, -s.referent, s.layer, s.head)),
            "seeds": init_seeds,
            "best_top1": sorted(
                max(h.top1 for h in heads_at_init(model, seed, aligned).values()) for seed in init_seeds
            ),
        }
    return result


# --- output ------------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_report(title: str, r: dict, limit: int | None) -> str:
    s = r["selective"]
    out = [
        f"== {title}",
        f"-- at the pronoun (query = she/he), {r['n_probes']} two-person probes:",
        head_table(r["at_pronoun"], limit=limit),
        "-- at the predicting position (query = the token before the pronoun):",
        head_table(r["at_predicting"], limit=limit),
        f"most selective head {s.name}: top-1 by family "
        + ", ".join(f"{k} {_pct(v)}" for k, v in r["selective_by_family"].items())
        + "; by referent gender "
        + ", ".join(f"{k} {_pct(v)}" for k, v in r["selective_by_gender"].items()),
    ]
    if "heldout" in r:
        h = r["heldout"]
        heads = (("best", h["best"]), ("most selective", h["selective"]), ("its own best", h["own_selective"]))
        out.append(
            f"held-out family ({h['n_probes']} probes; first noun {_pct(h['baselines']['first_noun'])}, "
            f"nearest {_pct(h['baselines']['nearest_noun'])}): "
            + "; ".join(
                f"{label} {x.name} referent {x.referent:.3f} distractor {x.distractor:.3f} top-1 {_pct(x.top1)}"
                for label, x in heads
            )
        )
    o = r["object_choice"]
    if o["n"]:
        out.append(
            f"object choice ({o['n']} contexts such as '..., and she hugged'): the other person preferred to "
            f"the referent in {_pct(o['accuracy'])} (position heuristics 50%)"
        )
    if r["agreement"] is not None:
        out.append(agreement_lines(r["agreement"].reading, r["agreement"].ablations))
        base = r["agreement"].stats.accuracy
        for ab in r["more_ablations"]:
            after, top1 = ab.reading.agreement.accuracy, ab.best_top1_left
            out.append(
                f"ablating {', '.join(ab.heads)} ({ab.label}): agreement {after:.3f} "
                f"({100 * (after - base):+.1f} points); best top-1 left {_pct(top1)} "
                f"({100 * (top1 - s.top1):+.1f} points)"
            )
        out.append(
            "object choice with heads ablated: "
            + ", ".join(f"without {label} {_pct(value)}" for label, value in r["object_ablated"].items())
        )
    if "init" in r:
        i = r["init"]
        tops = i["best_top1"]
        out.append(
            f"untrained, same config: the most selective head's top-1 over seeds {i['seeds'][0]}-"
            f"{i['seeds'][-1]}: {_pct(tops[0])} to {_pct(tops[-1])}, median {_pct(tops[len(tops) // 2])}; "
            f"with this run's seed {i['seed']}: {s.name} {_pct(i['same_head'].top1)} (trained "
            f"{_pct(s.top1)}), the most selective {i['selective'].name} {_pct(i['selective'].top1)}"
        )
    if "residual" in r:
        width = len(next(iter(r["residual"].values())))
        out.append("linear read-out accuracy by layer (0 = embeddings):")
        out.append(f"{'':<26}" + "".join(f"{'emb' if n == 0 else 'L' + str(n - 1):>7}" for n in range(width)))
        out += [f"{key:<26}" + "".join(f"{_pct(v):>7}" for v in values) for key, values in r["residual"].items()]
    return "\n".join(out)


SUMMARY = (
    "| checkpoint | step | val | best head: ref / dis, top-1 | most selective: ref / dis, top-1 | "
    "same head untrained | held-out, same head | agreement (1st / 2nd) | object choice | "
    "without most selective: top-1 / agreement | without name readers: agreement |\n"
    "|---|---:|---:|---|---|---|---|---|---:|---|---|"
)


def summary_row(name: str, step: int, val: float, r: dict) -> str:
    b, s = r["best"], r["selective"]
    held = r.get("heldout", {}).get("selective")
    a = r["agreement"]
    by_kind = {ab.kind: ab for ab in (a.ablations if a else [])}
    sel, readers = by_kind.get("most_selective"), by_kind.get("name_readers")
    accuracy = a.stats.accuracy if a else None
    mention = a.stats.by_mention if a else {}
    agree = f"{_pct(accuracy)} ({_pct(mention.get('first'))} / {_pct(mention.get('second'))})" if a else "-"

    def without(ab: AblationResult) -> float:
        return 100 * (ab.reading.agreement.accuracy - accuracy)

    cells = [
        name,
        str(step),
        f"{val:.3f}",
        f"{b.name} {b.referent:.2f} / {b.distractor:.2f}, {_pct(b.top1)}",
        f"{s.name} {s.referent:.2f} / {s.distractor:.2f}, {_pct(s.top1)}",
        _pct(r["init"]["same_head"].top1) if "init" in r else "-",
        f"{held.referent:.2f}, {_pct(held.top1)}" if held else "-",
        agree,
        _pct(r["object_choice"]["accuracy"]),
        f"{100 * (sel.best_top1_left - s.top1):+.1f} / {without(sel):+.1f}" if sel else "-",
        f"{', '.join(readers.heads)}: {without(readers):+.1f}" if readers else "-",
    ]
    return "| " + " | ".join(cells) + " |"


def to_json(value: object) -> object:
    """A study's result as plain JSON values."""
    if isinstance(value, ProbeReport | HeadStats):
        return value.to_dict()
    if isinstance(value, Agreement):
        return {
            "agreement": to_json(value.stats),
            "reading": value.reading.results.per_head("name_reading"),
            "ablations": [to_json(ab) for ab in value.ablations],
        }
    if isinstance(value, AblationResult):
        after = value.reading.agreement
        return {
            "label": value.label,
            "heads": value.heads,
            "kind": value.kind,
            "mode": value.ablation.mode,
            "agreement": after.accuracy if after else None,
            "top1": value.best_top1_left,
        }
    if isinstance(value, AgreementStats):
        return to_json(vars(value))
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python tools/pronoun_study.py", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+", help="ckpt.pt files, or folders holding one")
    p.add_argument("--probes", type=Path, default=None, help="two-person probes (default: the corpus's own)")
    p.add_argument("--heldout", type=Path, default=None, help="held-out family (default: PROBES-heldout.jsonl)")
    p.add_argument("--agreement", type=Path, default=None, help="single-person contexts (default: the corpus's own)")
    p.add_argument("--ablate", action="append", default=[], help="also ablate these heads, e.g. L1H2+L2H0")
    p.add_argument("--residual", action="store_true", help="add linear read-outs of the residual stream")
    p.add_argument(
        "--init_seeds",
        type=int,
        default=0,
        help="also score untrained models of the same config: seeds 0..N-1, and the run's own seed",
    )
    p.add_argument("--brief", action="store_true", help="only the summary table")
    p.add_argument("--limit", type=int, default=None, help="heads shown per table")
    p.add_argument("--json", type=Path, default=None, help="write every report as JSON here")
    p.add_argument("--log_dir", type=Path, default=None, help="log each checkpoint's scores to TensorBoard here")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    writer = None
    if args.log_dir:
        from watch.show.tensorboard import TensorBoardWriter

        writer = TensorBoardWriter(args.log_dir)
    reports, rows = {}, []
    for name in args.checkpoints:
        loaded = load_model(name, torch.device("cpu"))
        checkpoint = loaded.checkpoint
        seed = int((checkpoint.get("train_config") or {}).get("seed", 0))
        r = study(
            loaded.model,
            loaded.tokenizer,
            probe_files(checkpoint, args),
            [a.split("+") for a in args.ablate],
            args.residual,
            list(range(args.init_seeds)),
            seed,
        )
        step, val = checkpoint["step"], checkpoint["best_val_loss"]
        if not args.brief:
            print(format_report(f"{name} (step {step}, best val {val:.4f})", r, args.limit) + "\n")
        rows.append(summary_row(f"{Path(name).parent.name}/{Path(name).name}", step, val, r))
        reports[name] = {"step": step, "best_val_loss": val, **to_json(r)}
        if writer is not None:
            from watch.show.tensorboard import log_agreement, log_scores

            log_scores(writer, step, r["_reading"])
            if r["agreement"] is not None:
                log_agreement(writer, step, r["agreement"].reading, r["agreement"].ablations)
    if writer is not None:
        writer.close()
    print(SUMMARY + "\n" + "\n".join(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, sys.argv[1:]))
