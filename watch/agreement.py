"""Pronoun agreement: does the model know who is "she" and who is "he", and which heads carry it?

Three measures, cheap enough for every evaluation of a training run:

- agreement: in contexts that name one person and stop before a pronoun ("lily went to the
  park and"), how often the model gives the agreeing pronoun more probability than the other
  one. Split by mention: "first" when nothing has referred back to the person yet, "second"
  when a pronoun already has (the model may then copy that pronoun instead of reading the name).
- name reading: each head's mean weight on the person's name from the position that predicts
  the pronoun, the place where the name's gender must reach the prediction.
- ablation: remove the most selective head on the two-person probes (the highest top-1, the
  referent outweighing the distractor from the pronoun), and separately the heads that read the
  name, then measure again: agreement, and the best top-1 any remaining head reaches. A head that
  does the work costs points when it is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from data.probes import AlignedAgreement, AlignedProbe, align_agreement, align_usable, load_agreement, within_block
from data.tokenizer import Tokenizer
from model.gpt import Ablation
from watch.capture import capture_attention, continuation_logits
from watch.heads import ablation_for, head_name
from watch.metrics import HeadStats, head_stats

READER_WEIGHT = 0.25  # a head reads the name when it puts at least this mean weight on it


@dataclass
class AgreementStats:
    accuracy: float                 # share of contexts where the agreeing pronoun is more probable
    by_mention: dict[str, float]    # the same for "first" and "second" mentions
    share: float                    # mean P(agreeing) / (P(agreeing) + P(other))
    n: int
    n_correct: int


@dataclass
class AblationResult:
    """The model with `heads` removed."""

    label: str                      # why these heads: "most_selective" or "name_readers"
    heads: list[str]
    agreement: float
    top1: float | None              # best top-1 of the heads left, on the two-person probes


@dataclass
class AgreementReport:
    agreement: AgreementStats
    reading: dict[str, float]       # head -> mean weight on the name from the predicting position
    selective: HeadStats | None     # the head with the highest top-1 (None without two-person probes)
    ablations: list[AblationResult] = field(default_factory=list)


def aligned_agreement(path: str | Path, tokenizer: Tokenizer) -> list[AlignedAgreement]:
    """The agreement contexts of a JSONL file in this tokenizer's positions; those using tokens
    outside its vocabulary are left out, with a warning."""
    return align_usable(load_agreement(path), align_agreement, tokenizer, f"agreement contexts in {path}")


def agreement_stats(model: nn.Module, contexts: Sequence[AlignedAgreement],
                    ablate: Ablation | None = None) -> AgreementStats:
    """How often the agreeing pronoun beats the other one as the next token (fast path)."""
    if not contexts:
        raise ValueError("agreement needs at least one context")
    logits = continuation_logits(model, contexts, ablate)
    hits: dict[str, list[bool]] = {}
    shares = []
    for item, row in zip(contexts, logits, strict=True):
        margin = row[item.right_id] - row[item.wrong_id]
        shares.append(torch.sigmoid(margin.double()).item())  # the agreeing pronoun's share of the two
        hits.setdefault(item.probe.mention or "", []).append(bool(margin > 0))
    correct = sum(sum(h) for h in hits.values())
    return AgreementStats(accuracy=correct / len(contexts),
                          by_mention={k: sum(h) / len(h) for k, h in sorted(hits.items()) if k},
                          share=sum(shares) / len(shares), n=len(contexts), n_correct=correct)


def name_reading(model: nn.Module, contexts: Sequence[AlignedAgreement]) -> dict[str, float]:
    """Each head's mean weight on the person's tokens from the last position of each context
    (contexts without a person are left out)."""
    named = [item for item in contexts if item.person_positions]
    return name_weights(capture_attention(model, [item.ids for item in named]), named) if named else {}


def name_weights(patterns: Sequence[Sequence[torch.Tensor]], contexts: Sequence[AlignedAgreement]) -> dict[str, float]:
    """`name_reading` from captured patterns: `patterns[context][layer]` is [head, query_pos, key_pos]."""
    if len(patterns) != len(contexts) or not contexts:
        raise ValueError(f"{len(patterns)} captured patterns for {len(contexts)} contexts; give one per context")
    n_layer, n_head = len(patterns[0]), patterns[0][0].shape[0]
    sums = torch.zeros(n_layer, n_head, dtype=torch.float64)
    for layers, item in zip(patterns, contexts, strict=True):
        for layer, pattern in enumerate(layers):
            sums[layer] += pattern[:, item.continuation_pos, item.person_positions].sum(-1).double()
    return {head_name(layer, head): sums[layer, head].item() / len(contexts)
            for layer in range(n_layer) for head in range(n_head)}


def name_readers(reading: dict[str, float]) -> list[str]:
    """The heads that put at least READER_WEIGHT on the name, else the one that puts the most."""
    readers = sorted(name for name, weight in reading.items() if weight >= READER_WEIGHT)
    if not readers and reading:
        readers = [max(reading, key=lambda name: (reading[name], name))]
    return readers


def most_selective(stats: dict[str, HeadStats]) -> HeadStats:
    """The head whose referent most often outweighs the distractor (then by referent weight, then position)."""
    return min(stats.values(), key=lambda s: (-s.top1, -s.referent, s.layer, s.head))


def agreement_report(model: nn.Module, contexts: Sequence[AlignedAgreement],
                     probes: Sequence[AlignedProbe] = ()) -> AgreementReport:
    """Agreement, name reading, the most selective head on `probes`, and both ablations."""
    stats = head_stats(capture_attention(model, [p.ids for p in probes]), probes) if probes else None
    report = AgreementReport(agreement_stats(model, contexts), name_reading(model, contexts),
                             most_selective(stats) if stats else None)
    choices = [("most_selective", [report.selective.name] if report.selective else []),
               ("name_readers", name_readers(report.reading))]
    report.ablations = [ablation_result(model, contexts, probes, label, heads) for label, heads in choices if heads]
    return report


def ablation_result(model: nn.Module, contexts: Sequence[AlignedAgreement], probes: Sequence[AlignedProbe],
                    label: str, heads: Sequence[str]) -> AblationResult:
    """Agreement and the best remaining top-1 with `heads` ("L1H3", ...) removed."""
    cfg = model.config
    ablate = ablation_for(heads, cfg.n_layer, cfg.n_head)
    top1 = None
    if probes:
        stats = head_stats(capture_attention(model, [p.ids for p in probes], ablate), probes)
        left = [s.top1 for name, s in stats.items() if name not in heads]
        top1 = max(left) if left else None
    return AblationResult(label, list(heads), agreement_stats(model, contexts, ablate).accuracy, top1)


def agreement_scalars(report: AgreementReport) -> dict[str, float]:
    """The report's numbers by name: agreement_accuracy (also per mention), agreement_share,
    most_selective_top1, and both after each ablation (`..._without_<label>`)."""
    a = report.agreement
    out = {"agreement_accuracy": a.accuracy, "agreement_share": a.share}
    out.update({f"agreement_accuracy_{m}_mention": v for m, v in a.by_mention.items()})
    if report.selective is not None:
        out["most_selective_top1"] = report.selective.top1
    for ab in report.ablations:
        out[f"agreement_accuracy_without_{ab.label}"] = ab.agreement
        if ab.top1 is not None:
            out[f"most_selective_top1_without_{ab.label}"] = ab.top1
    return out


def log_agreement(writer: Any, step: int, report: AgreementReport) -> None:
    """The numbers as scalars, under probes/agreement_... and attention/top1/most_selective..., and the
    ablated heads as text."""
    for name, value in agreement_scalars(report).items():
        tag = "attention/top1/most_selective" + name.removeprefix("most_selective_top1") \
            if name.startswith("most_selective_top1") else f"probes/{name}"
        writer.add_scalar(tag, value, step)
    if report.ablations:
        text = "; ".join(f"{ab.label.replace('_', ' ')}: {', '.join(ab.heads)}" for ab in report.ablations)
        writer.add_text("probes/ablated_heads", f"step {step}, ablated: {text}", step)


def agreement_lines(report: AgreementReport) -> str:
    """The report for a terminal, one finding a line."""
    a = report.agreement
    mentions = ", ".join(f"{m} mention {v:.3f}" for m, v in a.by_mention.items())
    lines = [f"pronoun agreement on {a.n} single-person contexts: {a.accuracy:.3f}"
             + (f" ({mentions})" if mentions else "")]
    top = sorted(report.reading.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    if top:
        lines.append("weight on the name from the position before the pronoun: "
                     + ", ".join(f"{name} {weight:.2f}" for name, weight in top))
    s = report.selective
    if s is not None:
        lines.append(f"most selective head at the pronoun: {s.name}, top-1 {100 * s.top1:.1f}% "
                     f"(referent {s.referent:.3f}, distractor {s.distractor:.3f})")
    for ab in report.ablations:
        line = (f"ablating {', '.join(ab.heads)} ({ab.label.replace('_', ' ')}): agreement {ab.agreement:.3f} "
                f"({100 * (ab.agreement - a.accuracy):+.1f} points)")
        if ab.top1 is not None and s is not None:
            line += f"; best top-1 left {100 * ab.top1:.1f}% ({100 * (ab.top1 - s.top1):+.1f} points)"
        lines.append(line)
    return "\n".join(lines)


class AgreementWatch:
    """A training callback: the agreement report in TensorBoard at each evaluation, and on the
    terminal (with its numbers for HParams) at the end of a completed run. `probes` are the
    two-person probes the attention top-1 is measured on (may be empty)."""

    def __init__(self, writer: Any, contexts: Sequence[AlignedAgreement],
                 probes: Sequence[AlignedProbe] = ()) -> None:
        self.writer = writer
        self.contexts = list(contexts)
        self.probes = list(probes)
        self.last: tuple[int, AgreementReport] | None = None  # the latest evaluation's, reused at the end

    def on_fit_start(self, trainer: Any) -> None:
        """Contexts and probes longer than the model's block_size are left out (the warning about
        probes is the attention watch's)."""
        block_size = trainer.model.config.block_size
        self.contexts = within_block(self.contexts, block_size, "agreement contexts")
        self.probes = [item for item in self.probes if len(item.ids) <= block_size]

    def on_evaluate(self, trainer: Any, evaluation: Any) -> None:
        if self.contexts:
            report = agreement_report(trainer.model, self.contexts, self.probes)
            log_agreement(self.writer, evaluation.step, report)
            self.last = (evaluation.step, report)

    def on_fit_end(self, trainer: Any, result: Any) -> None:
        if result.completed and self.contexts:
            fresh = self.last is not None and self.last[0] == result.step
            report = self.last[1] if fresh else agreement_report(trainer.model, self.contexts, self.probes)
            print("\n" + agreement_lines(report))
            result.metrics.update({f"hparam/{name}": value for name, value in agreement_scalars(report).items()})
