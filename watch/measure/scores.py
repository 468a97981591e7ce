"""Every score the watch reads, each a small function of a capture (`watch/measure/capture.py`): the kinds of probe
set (`watch.measure.reading.PROBE_KINDS`) and the head types (`watch.measure.headtypes.TYPES`) name the scores read
on them, and every pass (`watch/measure/reading.py`) computes them into its `Results`, where every
reader finds them by name. A score adds up over the captures of its probe set: its function returns (total, count),
and the score is total / count; a head score's total is a [layer, head] float64 tensor.

A head type's score (Olsson et al. 2022) is the attention weight a head puts on the type's target keys, summed
where there are several, averaged over the query positions that have a target, so a head that does nothing else
scores 1.0. TransformerLens's `detect_head` divides the same weight by every query position instead, those without
a target included, so a perfect induction head on repeated tokens scores below 0.5 there; the two are not mixed.
`broad` is a number beside the types, not a type.

The in-context score compares each token late in one held-out window with the same token early in its partner
(`watch.measure.probesets.held_out_text`), which takes out how hard the token is, so a few hundred windows measure it
to a few hundredths of a nat; it and the in-context gain come with their spread (`spread`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from watch.measure.capture import Capture
from watch.measure.probesets import icl_positions

Total = tuple[torch.Tensor | float, int]  # (total, count): the score is total / count
# A score's function of one capture: a head score's total is a [layer, head] tensor, a model score's a number.
Measure = Callable[[Capture], Total]


# --- the shared maths ---------------------------------------------------------------------------------


def weight_by_sequence(capture: Capture, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head and sequence, the weight on `targets` ([N, query_pos, key_pos] bool) summed over each query's targets,
    added over the queries that have one: (total [N, layer, head], number of such queries [N])."""
    targets = targets.to(torch.float64)
    queries = (targets.sum(-1) > 0).to(torch.float64)  # [N, T]: queries with a target
    totals = [((pattern.double() * targets[:, None]).sum(-1) * queries[:, None]).sum(2) for pattern in capture.patterns]
    return torch.stack(totals, dim=1), queries.sum(1)


def weight_at_offset(capture: Capture, offset: int, first_query: int) -> Total:
    """Per head, the weight from each query i >= `first_query` to key i - `offset`, added over those
    queries of every sequence (all of one length): (total [layer, head], number of queries)."""
    length = capture.ids.shape[1]
    totals = [
        pattern.diagonal(offset=-offset, dim1=-2, dim2=-1)[..., first_query - offset :].double().sum((0, 2))
        for pattern in capture.patterns
    ]
    return torch.stack(totals), capture.ids.shape[0] * max(length - first_query, 0)


def next_token_losses(capture: Capture) -> torch.Tensor:
    """[N, T - 1]: the loss (nats) of predicting token t + 1 from positions up to t."""

    def losses() -> torch.Tensor:
        log_probs = torch.log_softmax(capture.logits[:, :-1].double(), dim=-1)
        return -log_probs.gather(-1, capture.ids[:, 1:].unsqueeze(-1)).squeeze(-1)

    return capture.shared("next_token_losses", losses)


# --- where a head type looks ------------------------------------------------------------------------


def at_offset(offset: int) -> Measure:
    """Per head, the weight from each token to the one `offset` before it (from position 1 for offset 0)."""
    return partial(weight_at_offset, offset=offset, first_query=max(offset, 1))


def on_targets_with_spread(name: str, key: str, targets: Callable[[Capture], torch.Tensor]) -> dict[str, Measure]:
    """The head score `name`, per head the weight on `targets(capture)` (which depend on the sequences alone: made once
    per set, as `key`), and what its spread is read from: each sequence's own score, averaged
    and squared over the sequences that have a target (`{name}_sequences`, `{name}_squares`; `derived_head_scores`).
    The random sequences are the draws, so the spread says how far another draw of as many could move the score."""

    def per_sequence(capture: Capture) -> tuple[torch.Tensor, torch.Tensor]:
        """(each sequence's total weight on its targets [N, layer, head], its queries with a target [N]): made once
        per capture for the three scores."""
        return capture.shared(
            f"{name} by sequence",
            lambda: weight_by_sequence(capture, capture.constant(key, lambda: targets(capture))),
        )

    def whole(capture: Capture) -> Total:  # the queries of every sequence together
        totals, queries = per_sequence(capture)
        return totals.sum(0), int(queries.sum())

    def moment(power: int) -> Measure:
        def measure(capture: Capture) -> Total:
            totals, queries = per_sequence(capture)
            counted = queries > 0
            means = totals[counted] / queries[counted][:, None, None]  # each sequence's own score
            return (means**power).sum(0), int(counted.sum())

        return measure

    return {name: whole, f"{name}_sequences": moment(1), f"{name}_squares": moment(2)}


def same_token(capture: Capture) -> torch.Tensor:
    """[N, T, T]: key j < query i holds the same token as i."""
    same = capture.ids.unsqueeze(2) == capture.ids.unsqueeze(1)
    return same & torch.ones_like(same[0]).tril(diagonal=-1)


def induction_targets(ids: torch.Tensor) -> torch.Tensor:
    """[N, T, T]: key j is a target of query i (in the second copy) when the token before j is token i."""
    n, length = ids.shape
    copy = length // 2
    # shift "same token" one key right
    earlier = ids.unsqueeze(2) == ids.unsqueeze(1)  # [N, i, j-1]
    targets = torch.zeros(n, length, length, dtype=torch.bool)
    targets[:, :, 1:] = earlier[:, :, :-1]
    targets &= torch.ones(length, length, dtype=torch.bool).tril(diagonal=-1)  # keys before i only
    targets[:, :copy] = False  # queries in the second copy
    return targets


def reach_targets(capture: Capture, distance: int) -> torch.Tensor:
    """[N, T, T]: the induction targets of the repeat at `distance` in each row: queries in its second copy,
    keys in it after an earlier occurrence of the query's token (no other repeat's)."""
    ids = capture.ids
    targets = torch.zeros(*ids.shape, ids.shape[1], dtype=torch.bool)
    for row, segments in enumerate(capture.items):
        for start, d in segments:
            if d == distance:
                span = slice(start, start + 2 * d)
                targets[row, span, span] = induction_targets(ids[row : row + 1, span])[0]
    return targets


def sink(capture: Capture) -> Total:
    """Per head, the weight on the first position, from every later one."""
    totals = [pattern[:, :, 1:, 0].double().sum((0, 2)) for pattern in capture.patterns]
    return torch.stack(totals), capture.ids.shape[0] * (capture.ids.shape[1] - 1)


def broad(capture: Capture) -> Total:
    """Per head, the mean entropy of its rows relative to a uniform row (1: spread evenly)."""
    length = capture.ids.shape[1]
    uniform = torch.log(torch.arange(2, length + 1, dtype=torch.float64))  # a uniform row from position 1
    totals = []
    for pattern in capture.patterns:
        p = pattern[:, :, 1:].double()
        entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)  # [N, H, T - 1]
        totals.append((entropy / uniform).sum((0, 2)))
    return torch.stack(totals), capture.ids.shape[0] * (length - 1)


# --- in-context learning -----------------------------------------------------------------------------


def copy_losses(capture: Capture, second: bool) -> torch.Tensor:
    """[N, L - 1]: the losses of tokens 2..L of each sequence's first or `second` copy, predicted from its
    positions 0..L-2."""
    copy = capture.ids.shape[1] // 2
    losses = next_token_losses(capture)
    return losses[:, copy : 2 * copy - 1] if second else losses[:, : copy - 1]


def gains(capture: Capture) -> torch.Tensor:
    """[N]: each sequence's in-context gain, the mean loss of its first copy minus that of its second."""
    return copy_losses(capture, second=False).mean(1) - copy_losses(capture, second=True).mean(1)


def in_context_differences(capture: Capture) -> torch.Tensor:
    """[pairs]: for each pair of held-out windows (`watch.measure.probesets.held_out_text`), the mean loss of the
    tokens of the first window's late band minus the mean loss of the same tokens early in its partner:
    what the longer context is worth on those tokens (below 0: they are predicted better with it)."""
    if capture.probe_set.group != 2 or capture.ids.shape[0] % 2:
        return torch.zeros(0, dtype=torch.float64)
    length = capture.ids.shape[1]
    early, late = icl_positions(length)
    losses = next_token_losses(capture)  # loss of token t + 1 at column t
    first, partner = losses[0::2], losses[1::2]
    count = late.stop - late.start
    with_context = first[:, late.start - 1 : late.stop - 1].mean(1)
    without = partner[:, early.start - 1 : early.start - 1 + count].mean(1)
    return with_context - without


def mean_of(values_of: Callable[[Capture], torch.Tensor], *, squared: bool = False) -> Measure:
    """A model score: the mean of `values_of(capture)` (or of their squares, for a spread) over every value."""

    def measure(capture: Capture) -> Total:
        values = values_of(capture) ** 2 if squared else values_of(capture)
        return float(values.sum()), values.numel()

    return measure


def derived_model_scores(values: dict[str, float], counts: dict[str, int]) -> dict[str, float]:
    """The scores made of others: the in-context gain, and the spread of it and of the in-context score."""
    out = {}
    if "loss_first_copy" in values and "loss_second_copy" in values:
        out["in_context_gain"] = values["loss_first_copy"] - values["loss_second_copy"]
    for name in ("in_context_gain", "in_context_score"):  # the numbers reported with their spread
        mean, squares = {**values, **out}.get(name), values.get(f"{name}_squares")
        if mean is not None and squares is not None:
            figures = torch.tensor([mean, squares], dtype=torch.float64)
            out[f"{name}_spread"] = float(spread(*figures, counts.get(f"{name}_squares", 0)))
    return out


def derived_head_scores(heads: dict[str, torch.Tensor], counts: dict[str, int]) -> dict[str, torch.Tensor]:
    """The spread of each head score read with its sequences (`on_targets_with_spread`): [layer, head], from the mean
    and the mean square of the sequences' own scores."""
    out = {}
    for name in heads:
        means, squares = heads.get(f"{name}_sequences"), heads.get(f"{name}_squares")
        if means is not None and squares is not None:
            out[f"{name}_spread"] = spread(means, squares, counts.get(f"{name}_squares", 0))
    return out


def spread(means: torch.Tensor, squares: torch.Tensor, count: int) -> torch.Tensor:
    """Two standard errors of a mean of `count` independent draws with this mean and mean square (of each of a
    tensor's at once: every head's): drawing the sequences again lands within this of the mean 19 times in 20, so a
    figure inside it is no measurable effect, and one outside it cannot change sign from sampling alone. Infinite for
    fewer than two draws."""
    if count < 2:
        return torch.full_like(means, math.inf)
    variance = (squares - means**2).clamp_min(0.0) * count / (count - 1)
    return 2 * (variance / count).sqrt()


# --- pronoun probes: the pronoun's row ---------------------------------------------------------------


def _pronoun_masks(capture: Capture) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each probe's pronoun position [probe], its referent's and its distractor's keys [probe, key] (float64),
    and whether its words and pronoun are clear of position 0 [probe]."""
    items = capture.items
    n, width = len(items), capture.ids.shape[1]
    pronoun = torch.tensor([item.pronoun_pos for item in items])
    referent_at, distractor_at = torch.zeros(n, width, dtype=torch.float64), torch.zeros(n, width, dtype=torch.float64)
    clear = torch.zeros(n, dtype=torch.bool)
    for index, item in enumerate(items):
        referent_at[index, item.referent_positions] = 1.0
        distractor_at[index, item.distractor_positions] = 1.0
        clear[index] = item.pronoun_pos != 0 and 0 not in (*item.referent_positions, *item.distractor_positions)
    return pronoun, referent_at, distractor_at, clear


def _pronoun_weights(capture: Capture) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight on the referent, on the distractor: each [layer, probe, head], summed over a word's tokens;
    the rest of the row after position 0, to renormalise by; the probes clear of position 0 [probe])."""
    pronoun, referent_at, distractor_at, clear = capture.constant("pronoun masks", lambda: _pronoun_masks(capture))
    rows = torch.stack([pattern[torch.arange(len(pronoun)), :, pronoun] for pattern in capture.patterns]).double()
    referent = (rows * referent_at[None, :, None, :]).sum(-1)  # rows: [layer, probe, head, key]
    distractor = (rows * distractor_at[None, :, None, :]).sum(-1)
    return referent, distractor, rows[..., 1:].sum(-1).clamp_min(1e-12), clear


def pronoun_score(which: str, *, no_sink: bool = False) -> Measure:
    """Per head, from the pronoun: the mean weight on the noun it refers to ("referent"), on the other noun
    ("distractor"), or the share of probes whose referent outweighs the distractor ("top1"). `no_sink`: key 0 dropped
    and the row renormalised, over the probes whose words and pronoun are clear of position 0 (there the sink and a
    word cannot be told apart)."""

    def measure(capture: Capture) -> Total:
        ref, dis, rest, clear = capture.shared("pronoun weights", lambda: _pronoun_weights(capture))
        counted = torch.ones_like(clear)
        if no_sink:
            ref, dis, counted = ref / rest, dis / rest, clear
        values = {"referent": ref, "distractor": dis, "top1": (ref > dis).double()}[which]  # a tie is not a win
        return (values * counted[None, :, None]).sum(1), int(counted.sum())

    return measure


# --- pronoun probes: what the model predicts after the pronoun -------------------------------------


def _continuation_masks(capture: Capture) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which next tokens count for each pronoun probe: [probe, vocab] the referent's continuations and the
    distractor's, and [probe] the probes that have a continuation position. Made once per probe set, so that
    every probe is scored in one tensor operation."""

    def make() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        vocab = capture.logits.shape[-1]
        referent = torch.zeros(len(capture.items), vocab, dtype=torch.bool)
        distractor = torch.zeros_like(referent)
        scored = torch.zeros(len(capture.items), dtype=torch.bool)
        for row, item in enumerate(capture.items):
            if item.continuation_pos is not None:
                scored[row] = True
                referent[row, list(item.continuation_ids)] = True
                distractor[row, list(item.distractor_continuation_ids)] = True
        return referent, distractor, scored

    masks = capture.constant("continuation masks", make)
    return tuple(mask.to(capture.logits.device) for mask in masks)


def argmax_among(capture: Capture, whose: str) -> Total:
    """The share of probes whose next-token argmax after the pronoun is one of the continuations of `whose`
    ("referent": something the referent does, or "distractor")."""
    if capture.logits is None:
        return 0.0, 0
    referent, distractor, scored = _continuation_masks(capture)
    best = capture.logits.argmax(-1, keepdim=True)  # [probe, 1]
    hits = {"referent": referent, "distractor": distractor}[whose].gather(1, best).squeeze(1) & scored
    return float(hits.sum()), int(scored.sum())


def logit_diff(capture: Capture) -> Total:
    """The mean of (best referent-continuation logit - best distractor one)."""
    # TransformerLens's usual metric: how much more the model favours the right continuation,
    # which moves even when the argmax does not.
    if capture.logits is None:
        return 0.0, 0
    referent, distractor, scored = _continuation_masks(capture)
    counted = scored & referent.any(-1) & distractor.any(-1)
    logits = capture.logits.double()
    diffs = logits.masked_fill(~referent, -math.inf).amax(-1) - logits.masked_fill(~distractor, -math.inf).amax(-1)
    return float(diffs[counted].sum()), int(counted.sum())


# --- contexts with a right and a wrong next word (agreement) ---------------------------------------


def _margins(capture: Capture) -> list[tuple]:
    """(item, logit of the right next word - logit of the wrong one) for each context (none without logits)."""
    if capture.logits is None:
        return []
    return [
        (item, capture.logits[row, item.right_id] - capture.logits[row, item.wrong_id])
        for row, item in enumerate(capture.items)
    ]


def right_word(mention: str | None = None, *, share: bool = False) -> Measure:
    """The share of contexts where the right next word is more probable than the wrong one, or with `share` the mean
    of P(right) / (P(right) + P(wrong)) over them; with `mention`, of the contexts of that mention only ("first",
    "second")."""

    def measure(capture: Capture) -> Total:
        margins = [margin for item, margin in _margins(capture) if mention is None or item.probe.mention == mention]
        values = [torch.sigmoid(margin.double()).item() if share else bool(margin > 0) for margin in margins]
        return float(sum(values)), len(values)

    return measure


def name_reading(capture: Capture) -> Total:
    """Per head, the mean weight on the person's name from the position that predicts the pronoun."""
    named = [(row, item) for row, item in enumerate(capture.items) if item.person_positions]
    totals = torch.zeros(len(capture.patterns), capture.patterns[0].shape[1], dtype=torch.float64)
    for row, item in named:
        for layer, pattern in enumerate(capture.patterns):
            totals[layer] += pattern[row, :, item.continuation_pos, item.person_positions].sum(-1).double()
    return totals, len(named)
