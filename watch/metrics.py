"""How well each attention head resolves pronouns, measured on aligned probes.

For a probe like "The dog chased the ball because it was bored", the query row
is the pronoun ("it"); a head that resolves it puts its weight on the referent
("dog") rather than the distractor ("ball"). A word's weight is the sum over
its sub-tokens. Every head is scored; the best is the one with the highest
mean weight on the referent.

Small models often park most of a row's weight on the first token (an
"attention sink") whatever the sentence, which hides what the rest of the row
does; the `_no_sink` scores drop key position 0 and renormalise the row.
Probes whose referent or distractor starts at position 0 are left out of
those scores, since there the sink and the word cannot be told apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from model.gpt import Ablation
from watch.capture import capture_rows, continuation_logits
from watch.heads import Head, ablation_names, head_name, parse_head

if TYPE_CHECKING:
    from data.probes import AlignedProbe

# A probe names one referent and one distractor, so guessing is right half the time.
CHANCE = 0.5


@dataclass
class HeadStats:
    """One head's scores over a probe set (weights are means over probes)."""

    layer: int
    head: int
    referent: float            # mean weight from the pronoun row to the referent
    distractor: float          # the same for the distractor
    top1: float                # fraction of probes where the referent outweighs every other candidate
    referent_no_sink: float | None    # the same three with key position 0 dropped, row renormalised;
    distractor_no_sink: float | None  # None when no probe qualifies
    top1_no_sink: float | None
    n_probes: int
    n_top1: int
    n_no_sink: int             # probes counted in the _no_sink scores
    n_top1_no_sink: int

    @property
    def name(self) -> str:
        return head_name(self.layer, self.head)

    def to_dict(self) -> dict:
        return {"name": self.name, **{k: _json_number(v) for k, v in asdict(self).items()}}


@dataclass
class ContinuationStats:
    """Does the model continue the pronoun's sentence as if it knew the referent?"""

    accuracy: float | None          # argmax next token is one of the referent's continuations
    distractor_rate: float | None   # argmax next token is one of the distractor's continuations
    logit_diff: float | None        # mean (best referent-continuation logit - best distractor one)
    n: int                          # probes with a continuation position
    n_correct: int
    n_logit_diff: int               # probes with both kinds of continuation


@dataclass
class ProbeReport:
    """Scores of every head, the best head, baselines and continuation accuracy."""

    heads: dict[str, HeadStats]
    n_probes: int
    baselines: dict[str, float]
    continuation: ContinuationStats
    ablated: list[str] = field(default_factory=list)

    def ranked(self) -> list[HeadStats]:
        """Heads best first: by mean referent weight, then top-1 accuracy, then position."""
        return sorted(self.heads.values(), key=_rank_key)

    @property
    def best(self) -> HeadStats:
        return self.ranked()[0]

    @property
    def continuation_accuracy(self) -> float | None:
        return self.continuation.accuracy

    def to_dict(self) -> dict:
        """JSON-able: plain numbers, None where a score is undefined."""
        return {
            "n_probes": self.n_probes,
            "best": self.best.to_dict(),
            "heads": {name: stats.to_dict() for name, stats in self.heads.items()},
            "baselines": dict(self.baselines),
            "continuation_accuracy": _json_number(self.continuation.accuracy),
            "continuation": {k: _json_number(v) for k, v in asdict(self.continuation).items()},
            "ablated": list(self.ablated),
        }


def _rank_key(stats: HeadStats) -> tuple:
    return (-stats.referent, -stats.top1, stats.layer, stats.head)


def _json_number(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _check_positions(item: AlignedProbe, index: int, length: int) -> None:
    named = [("pronoun_pos", [item.pronoun_pos]), ("referent_positions", item.referent_positions),
             ("distractor_positions", item.distractor_positions)]
    for label, positions in named:
        bad = [p for p in positions if not 0 <= p < length]
        if bad:
            raise ValueError(f"probe {index} ({item.probe.text!r}): {label} {bad} outside its {length} tokens")
    if not item.referent_positions:
        raise ValueError(f"probe {index} ({item.probe.text!r}) has no referent positions")


def head_stats(patterns: Sequence[Sequence[torch.Tensor]], aligned: Sequence[AlignedProbe]) -> dict[str, HeadStats]:
    """Score every head from captured patterns.

    `patterns[probe][layer]` is [head, query_pos, key_pos] (as `capture_attention`
    returns), `aligned[probe]` the matching AlignedProbe.
    """
    if len(patterns) != len(aligned):
        raise ValueError(f"{len(patterns)} captured patterns for {len(aligned)} probes; capture one per probe")
    if not aligned:
        raise ValueError("no probes to score")
    width = max(layers[0].shape[-1] for layers in patterns)
    n_layer, n_head = len(patterns[0]), patterns[0][0].shape[0]
    rows = torch.zeros(n_layer, len(aligned), n_head, width, dtype=torch.float64)
    for index, (layers, item) in enumerate(zip(patterns, aligned, strict=True)):
        length = layers[0].shape[-1]
        _check_positions(item, index, length)
        for layer, pattern in enumerate(layers):
            rows[layer, index, :, :length] = pattern[:, item.pronoun_pos, :]
    return row_stats(rows, aligned)


def row_stats(rows: torch.Tensor, aligned: Sequence[AlignedProbe]) -> dict[str, HeadStats]:
    """Score every head from the pronoun rows: `rows` is [layer, probe, head, key_pos]
    (as `capture_rows` returns), zero beyond each probe's length."""
    n_layer, n, n_head, width = rows.shape
    if n != len(aligned) or not aligned:
        raise ValueError(f"{n} rows of attention for {len(aligned)} probes; score at least one, one row each")
    rows = rows.double()
    # 1 at the key positions of each probe's referent / distractor: [probe, key_pos].
    ref_at, dis_at = torch.zeros(n, width, dtype=torch.float64), torch.zeros(n, width, dtype=torch.float64)
    no_sink = torch.zeros(n, dtype=torch.bool)  # probes whose words and pronoun are clear of position 0
    for index, item in enumerate(aligned):
        _check_positions(item, index, min(len(item.ids), width))
        ref_at[index, item.referent_positions] = 1.0
        dis_at[index, item.distractor_positions] = 1.0
        no_sink[index] = item.pronoun_pos != 0 and 0 not in (*item.referent_positions, *item.distractor_positions)
    # Weight on each word, summed over its sub-tokens: [layer, probe, head].
    ref = (rows * ref_at[None, :, None, :]).sum(-1)
    dis = (rows * dis_at[None, :, None, :]).sum(-1)
    rest = rows[..., 1:].sum(-1).clamp_min(1e-12)  # the row without the sink, to renormalise by
    ref_n, dis_n = ref / rest, dis / rest
    keep = no_sink[None, :, None]
    n_no_sink = int(no_sink.sum())
    # Sums over probes: [layer, head].
    ref_sum, dis_sum = ref.sum(1), dis.sum(1)
    top1 = (ref > dis).sum(1)  # a tie is not a win
    referent_no_sink, distractor_no_sink = (ref_n * keep).sum(1), (dis_n * keep).sum(1)
    top1_ns = ((ref_n > dis_n) & keep).sum(1)

    stats = {}
    for layer in range(n_layer):
        for head in range(n_head):
            at = (layer, head)
            stats[head_name(layer, head)] = HeadStats(
                layer=layer, head=head,
                referent=ref_sum[at].item() / n, distractor=dis_sum[at].item() / n, top1=top1[at].item() / n,
                referent_no_sink=referent_no_sink[at].item() / n_no_sink if n_no_sink else None,
                distractor_no_sink=distractor_no_sink[at].item() / n_no_sink if n_no_sink else None,
                top1_no_sink=top1_ns[at].item() / n_no_sink if n_no_sink else None,
                n_probes=n, n_top1=int(top1[at]), n_no_sink=n_no_sink, n_top1_no_sink=int(top1_ns[at]),
            )
    return stats


def baselines(aligned: Sequence[AlignedProbe]) -> dict[str, float]:
    """Accuracy of heuristics that ignore the model, for the same probes.

    - chance: one of the two candidates at random.
    - first_noun: pick the candidate that appears first in the sentence.
    - nearest_noun: pick the candidate whose last sub-token is closest before the pronoun.
    A tie, or no candidate before the pronoun, counts as wrong (as a tie does for heads).
    """
    if not aligned:
        raise ValueError("no probes for baselines")
    first = nearest = 0
    for item in aligned:
        ref, dis = item.referent_positions, item.distractor_positions
        if not dis or min(ref) < min(dis):
            first += 1
        ref_gap = _gap(ref, item.pronoun_pos)
        if ref_gap < _gap(dis, item.pronoun_pos):
            nearest += 1
    n = len(aligned)
    return {"chance": CHANCE, "first_noun": first / n, "nearest_noun": nearest / n}


def _gap(positions: Sequence[int], pronoun_pos: int) -> float:
    before = [p for p in positions if p < pronoun_pos]
    return pronoun_pos - max(before) if before else math.inf


def continuation_stats(model: nn.Module, aligned: Sequence[AlignedProbe],
                       ablate: Ablation | None = None) -> ContinuationStats:
    """Continuation accuracy (and logit difference) from the fast path, optionally with heads ablated."""
    return _continuation(continuation_logits(model, aligned, ablate), aligned)


def _continuation(logits: Sequence[torch.Tensor | None], aligned: Sequence[AlignedProbe]) -> ContinuationStats:
    """Continuation accuracy (and logit difference) from each probe's logits at its continuation position."""
    n = correct = to_distractor = 0
    diffs = []
    for item, row in zip(aligned, logits, strict=True):
        if row is None:
            continue
        n += 1
        predicted = int(row.argmax())
        correct += predicted in item.continuation_ids
        to_distractor += predicted in item.distractor_continuation_ids
        if item.continuation_ids and item.distractor_continuation_ids:
            # TransformerLens's usual metric: how much more the model favours the
            # right continuation, which moves even when the argmax does not.
            diffs.append(row[list(item.continuation_ids)].max().item()
                         - row[list(item.distractor_continuation_ids)].max().item())
    return ContinuationStats(
        accuracy=correct / n if n else None, distractor_rate=to_distractor / n if n else None,
        logit_diff=sum(diffs) / len(diffs) if diffs else None, n=n, n_correct=correct, n_logit_diff=len(diffs),
    )


def evaluate_probes(model: nn.Module, aligned: Sequence[AlignedProbe],
                    ablate: Ablation | None = None) -> ProbeReport:
    """Score every head of `model` on the probes, plus baselines and continuation accuracy.

    One readable forward over the probes (or a few, for many long probes) gives both
    the pronoun rows and the continuation logits, so this is cheap enough to run every
    few training steps.
    `ablate` ({layer: [heads]}) zeroes those heads' outputs in both.
    """
    if not aligned:
        raise ValueError("evaluate_probes needs at least one probe")
    rows, logits = capture_rows(model, [item.ids for item in aligned], [item.pronoun_pos for item in aligned],
                                [item.continuation_pos for item in aligned], ablate)
    return ProbeReport(
        heads=row_stats(rows, aligned), n_probes=len(aligned), baselines=baselines(aligned),
        continuation=_continuation(logits, aligned), ablated=ablation_names(ablate),
    )


def ablation_effect(model: nn.Module, aligned: Sequence[AlignedProbe], head: str | Head) -> dict:
    """Continuation accuracy and logit difference with and without one head ("L1H3" or (1, 3))."""
    cfg = model.config
    layer, index = parse_head(head if isinstance(head, str) else head_name(*head), cfg.n_layer, cfg.n_head)
    base = continuation_stats(model, aligned)
    ablated = continuation_stats(model, aligned, {layer: [index]})

    def change(after: float | None, before: float | None) -> float | None:
        return None if after is None or before is None else after - before

    return {
        "head": head_name(layer, index),
        "n": base.n,
        "continuation_accuracy": base.accuracy,
        "continuation_accuracy_ablated": ablated.accuracy,
        "accuracy_change": change(ablated.accuracy, base.accuracy),
        "logit_diff": base.logit_diff,
        "logit_diff_ablated": ablated.logit_diff,
        "logit_diff_change": change(ablated.logit_diff, base.logit_diff),
    }
