"""The pronoun report's figures (`watch.measure.reading.probe_report` reads them from a pass): how well each head
resolves pronouns, and whether the model knows which pronoun agrees.

For a probe like "The dog chased the ball because it was bored", a head that resolves the pronoun puts its weight
from "it" on the referent ("dog") rather than the distractor ("ball"); the best head has the highest mean weight on
the referent. Small models often park most of a row's weight on the first token (an "attention sink") whatever the
sentence, hence the `_no_sink` scores. Agreement: in contexts that name one person and stop before a pronoun ("lily
went to the park and"), how often the agreeing pronoun is the more probable, split by mention ("first" when nothing
has referred back to the person yet, "second" when a pronoun has).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from watch.measure.heads import head_name

# A probe names one referent and one distractor, so guessing is right half the time.
CHANCE = 0.5
READER_WEIGHT = 0.25  # a head reads the name when it puts at least this mean weight on it


@dataclass
class HeadStats:
    """One head's scores over a probe set (weights are means over probes)."""

    layer: int
    head: int
    referent: float  # mean weight from the pronoun row to the referent
    distractor: float  # the same for the distractor
    top1: float  # fraction of probes where the referent outweighs the distractor
    referent_no_sink: float | None  # the same three with key position 0 dropped, row renormalised;
    distractor_no_sink: float | None  # None when no probe qualifies
    top1_no_sink: float | None
    n_probes: int
    n_top1: int
    n_no_sink: int  # probes counted in the _no_sink scores
    n_top1_no_sink: int

    @property
    def name(self) -> str:
        return head_name(self.layer, self.head)

    def to_dict(self) -> dict:
        return finite({"name": self.name, **asdict(self)})


@dataclass
class ContinuationStats:
    """Does the model continue the pronoun's sentence as if it knew the referent?"""

    accuracy: float | None  # argmax next token is one of the referent's continuations
    distractor_rate: float | None  # argmax next token is one of the distractor's continuations
    logit_diff: float | None  # mean (best referent-continuation logit - best distractor one)
    n: int  # probes with a continuation position
    n_correct: int
    n_logit_diff: int  # probes with both kinds of continuation


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
        return sorted(self.heads.values(), key=lambda s: (-s.referent, -s.top1, s.layer, s.head))

    @property
    def best(self) -> HeadStats:
        return self.ranked()[0]

    @property
    def most_selective(self) -> HeadStats:
        """The head whose referent most often outweighs the distractor (then by referent weight, then position)."""
        return min(self.heads.values(), key=lambda s: (-s.top1, -s.referent, s.layer, s.head))

    @property
    def continuation_accuracy(self) -> float | None:
        return self.continuation.accuracy

    def to_dict(self) -> dict:
        """JSON-able: plain numbers, None where a score is undefined."""
        heads = {name: stats.to_dict() for name, stats in self.heads.items()}
        return finite(
            {
                "n_probes": self.n_probes,
                "best": self.best.to_dict(),
                "heads": heads,
                "baselines": dict(self.baselines),
                "continuation_accuracy": self.continuation.accuracy,
                "continuation": asdict(self.continuation),
                "ablated": list(self.ablated),
            }
        )


def finite(value):
    """`value` with every float that JSON cannot hold (NaN, inf) replaced by None, however deep."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def baselines(aligned: Sequence) -> dict[str, float]:
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
        if _gap(ref, item.pronoun_pos) < _gap(dis, item.pronoun_pos):
            nearest += 1
    n = len(aligned)
    return {"chance": CHANCE, "first_noun": first / n, "nearest_noun": nearest / n}


def _gap(positions: Sequence[int], pronoun_pos: int) -> float:
    before = [p for p in positions if p < pronoun_pos]
    return pronoun_pos - max(before) if before else math.inf


def name_readers(reading: dict[str, float]) -> list[str]:
    """The heads that put at least READER_WEIGHT on the name, else the one that puts the most."""
    readers = sorted(name for name, weight in reading.items() if weight >= READER_WEIGHT)
    if not readers and reading:
        readers = [max(reading, key=lambda name: (reading[name], name))]
    return readers


@dataclass
class AgreementStats:
    accuracy: float  # share of contexts where the agreeing pronoun is more probable
    by_mention: dict[str, float]  # the same for "first" and "second" mentions
    share: float  # mean P(agreeing) / (P(agreeing) + P(other))
    n: int
    n_correct: int
