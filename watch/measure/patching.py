"""Which head carries the answer: activation patching, direct logit attribution and the logit lens, on a pair of
prompts of equal token length, a *clean* one and a *corrupted* one whose next tokens differ ("The big dog fetched
the big ball and she" → " dug"; "... and it" → " bounced").

The figure everything is measured by is the *logit difference*: the logit of the right answer (the clean prompt's
next token) minus that of the wrong one (the corrupted prompt's), at the last position.

Everything is read through the model's named sites (model/hooks.py): one run of every clean and corrupted prompt
records them all (`runs`), and a patched run is a corrupted prompt run again with some of another run's activations
put in at their sites, row by row (`patched`, the one patching function; `paths.py` builds on it too).

- **Activation patching** takes one part of the clean run into the corrupted run and asks how much of the clean logit
  difference comes back: 0 is the corrupted run's, 1 the clean run's, as TransformerLens's patching helpers report it
  with that metric. The parts (`PARTS`, each a site and the axes it is patched along): each head's output `z`, its
  queries, keys and values, at every position and at each position alone; each head's pattern; the residual stream
  entering each layer at each position; each MLP's output, everywhere and at each position. Every patched run of a
  pair goes through the model in one batch (`PATCHED_ROWS` rows at most per forward).
- **Direct logit attribution** splits the clean run's last residual stream into what each part wrote (the embeddings,
  each head's `z · W_O` without the output bias, the output biases, each MLP) and puts each through the final norm
  as the whole stream went through it (centred, divided by the whole stream's scale, times the norm's weight) and
  onto the answer's direction `W_U[right] - W_U[wrong]`: logits each part adds to the difference. The parts and the
  final norm's bias add up to the clean logit difference.
- **The logit lens** reads the residual stream after each layer as if it were the last (final norm, unembedding):
  the right answer's rank there (1: the top token) and its probability.

One rule for a share, however many pairs (`share_of_mean`): the share of the pairs' mean logit difference, with its
spread, and none while that mean is not above its spread (one pair: not at least MIN_GAP) — the model does not tell
the clean prompts from the corrupted ones, so there is no answer for a part to carry. `analyse` gives every figure of
one pair (`sample.py --patch`), `mean_over` the rule over several (`--patch FILE`), and `watched`, what the watch
logs at every pass, the shares of `WATCHED_PARTS` over its pairs (`PAIRS`, made by `pronoun_pairs` or
`repeat_pairs`) and each head's attribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn as nn

from common.errors import UserError
from data.probes import PatchPair, Probe, load_jsonl
from data.pronouns import PRONOUNS_OF
from data.tokenizer import Tokenizer, TokenizerError
from model.hooks import HEAD_SITES, Cache, Edit, Edits, site_name, sites
from watch.measure.heads import head_name
from watch.measure.probesets import ProbeSet, ProbeSets

PAIRS = "pairs"  # the kind of probe set the watch patches (`watch.measure.reading.PROBE_KINDS`)
PATHS = "paths"  # the same pairs where the watch reads the paths too (`watch/measure/paths.py`), and the paths
WATCHED_PAIRS = 16  # pairs a watch pass patches: its figures are means over them
PATCHED_ROWS = 512  # patched runs one forward takes: the demo's pair needs about 400, GPT-2 small's of 10 tokens 6,000
NO_LAYER = 1 << 30  # beyond any layer: a row that changes nothing yet
MIN_GAP = 0.01  # logits: one pair is patched when its clean difference is at least this above its corrupted one


class Part(NamedTuple):
    """What is patched: the kind of a site (`model.hooks.site_name`), the axes it is patched along (one share for each
    index of them), and what it is, in the reports' words."""

    site: str
    axes: tuple[str, ...]
    words: str


# Every part, as TransformerLens's helpers lay them out: get_act_patch_attn_head_out_all_pos is "heads", ..._by_pos
# "positions" [layer, head, pos], get_act_patch_resid_pre "residual", get_act_patch_attn_head_q_all_pos "queries", ...
# A part with the axes (layer, head) is a column of the report's head table; one with the axis (layer) alone, a line.
LAYER_HEAD, BY_POSITION = ("layer", "head"), ("layer", "head", "pos")
PARTS = {
    "heads": Part("z", LAYER_HEAD, "output"),
    "positions": Part("z", BY_POSITION, "output at one position"),
    "residual": Part("resid_pre", ("layer", "pos"), "residual stream entering the layer"),
    "patterns": Part("pattern", LAYER_HEAD, "pattern"),
    "queries": Part("q", LAYER_HEAD, "queries"),
    "keys": Part("k", LAYER_HEAD, "keys"),
    "values": Part("v", LAYER_HEAD, "values"),
    "queries_by_position": Part("q", BY_POSITION, "queries at one position"),
    "keys_by_position": Part("k", BY_POSITION, "keys at one position"),
    "values_by_position": Part("v", BY_POSITION, "values at one position"),
    "mlps": Part("mlp_out", ("layer",), "MLP's output"),
    "mlps_by_position": Part("mlp_out", ("layer", "pos"), "MLP's output at one position"),
}
WATCHED_PARTS = ("heads", "queries", "keys", "values", "mlps")  # what the watch patches at every pass
# Each part's figures as the watch's results name them: "patching" (the heads' outputs), "patching_queries", ...; a
# part of the axis (layer) alone one number a layer, "patching_mlps0", ...
WATCHED_NAMES = {part: "patching" if part == "heads" else f"patching_{part}" for part in WATCHED_PARTS}


@dataclass(frozen=True)
class Pair:
    """A clean and a corrupted prompt of equal token length, and the two answers: `answer` the right one (the clean
    prompt's next token), `wrong` the corrupted one's."""

    clean: list[int]
    corrupted: list[int]
    answer: int
    wrong: int


@dataclass(frozen=True)
class Patching:
    """One pair's figures. `shares[part]` for each of `PARTS` the model has, shaped by the part's axes: 0 the
    corrupted run's logit difference, 1 the clean run's, NaN when the pair is not measured (`measured`);
    `brought_back[part]`, what each part brings back in logits (patched minus corrupted), which means over pairs read;
    `attribution` {"heads": [layer, head], "mlps": [layer] (None for an attention-only model), "embeddings", "biases",
    "norm_bias"} in logits; `lens` [(rank, probability)] of the right answer after each layer."""

    pair: Pair
    clean_diff: float
    corrupted_diff: float
    shares: dict[str, torch.Tensor]
    brought_back: dict[str, torch.Tensor]
    attribution: dict[str, torch.Tensor | float | None]
    lens: list[tuple[int, float]]

    @property
    def measured(self) -> bool:
        """Whether the model tells the pair's prompts apart enough for a share to mean anything (`MIN_GAP`)."""
        return self.clean_diff - self.corrupted_diff >= MIN_GAP

    def carriers(self, least: float = 0.1) -> list[tuple[str, float]]:
        """The heads whose output, patched at every position, brings back at least `least` of the clean difference,
        highest share first."""
        heads = self.shares["heads"]
        found = [
            (head_name(layer, head), float(heads[layer, head]))
            for layer in range(heads.shape[0])
            for head in range(heads.shape[1])
            if heads[layer, head] >= least
        ]
        return sorted(found, key=lambda item: -item[1])


# --- a pair, checked ---------------------------------------------------------------------------------------------


def pair_for(
    model: nn.Module,
    tokenizer: Tokenizer,
    clean: str,
    corrupted: str,
    answer: str | None = None,
    wrong: str | None = None,
    names: tuple[str, str] = ("--answer", "--wrong"),
) -> Pair:
    """The pair of these texts, its answers the tokens given (each must be one token) or else the greedy next tokens
    of the clean and of the corrupted prompt. `UserError`, in one line, for what cannot be patched, naming the answers
    as `names` (the options, or a pairs file's fields)."""
    clean_ids, corrupted_ids = tokenizer.encode(clean), tokenizer.encode(corrupted)
    if not clean_ids or not corrupted_ids:
        raise UserError("the clean and the corrupted prompt each need at least one token; give two non-empty texts")
    if len(clean_ids) != len(corrupted_ids):
        raise UserError(
            f"the clean prompt has {len(clean_ids)} tokens and the corrupted one {len(corrupted_ids)}; patching "
            f"copies position by position, so change words for words of as many tokens"
        )
    if clean_ids == corrupted_ids:
        raise UserError(
            "the clean and the corrupted prompt are the same tokens: no part of one run differs from the other's to "
            "patch; change the word the answer depends on in the corrupted one"
        )
    if len(clean_ids) > model.config.block_size:
        raise UserError(
            f"the prompts have {len(clean_ids)} tokens, more than the model's block_size {model.config.block_size}; "
            f"shorten them"
        )
    greedy = None
    if answer is None or wrong is None:
        device = next(model.parameters()).device
        idx = torch.tensor([clean_ids, corrupted_ids], device=device)
        greedy = model.run_with_cache(idx)[0][:, -1].argmax(-1).tolist()
    answer_id = one_token(tokenizer, answer, names[0]) if answer is not None else greedy[0]
    wrong_id = one_token(tokenizer, wrong, names[1]) if wrong is not None else greedy[1]
    if answer_id == wrong_id:
        shown = tokenizer.decode([answer_id])
        how = " (the model's greedy next token after both prompts)" if answer is None and wrong is None else ""
        raise UserError(
            f"the right and the wrong answer are the same token {shown!r}{how}: nothing to tell apart; give "
            f"{names[0]} and {names[1]}, two different next tokens"
        )
    return Pair(clean_ids, corrupted_ids, answer_id, wrong_id)


def pairs_from_file(model: nn.Module, tokenizer: Tokenizer, path: str | Path) -> list[Pair]:
    """The pairs of a JSONL file of `PatchPair`s (data/probes.py), each checked as `pair_for` checks it; a problem is
    one line naming the file's line."""
    pairs = []
    for item in load_jsonl(path, PatchPair):
        try:
            fields = ('its "answer"', 'its "wrong"')  # a file's pair names its answers in fields, not options
            pairs.append(pair_for(model, tokenizer, item.clean, item.corrupted, item.answer, item.wrong, fields))
        except UserError as exc:
            raise UserError(f"{path} line {item.line}: {exc}") from None
    return pairs


# --- the watch's pairs: the pronoun demo's and repeated tokens -------------------------------------------------------


def pronoun_pairs(probes: ProbeSet, tokenizer: Tokenizer, most: int = WATCHED_PAIRS) -> ProbeSet | str:
    """Pairs made of pronoun probes: the clean prompt is a probe's text up to its pronoun ("The big dog fetched the
    big ball and she"), the corrupted one the same with a pronoun that can only mean the other noun ("... and it");
    the right answer is the first token of a word the referent does (" dug"), the wrong one of a word the other
    noun does (" bounced"). The first `most` probes that make such a pair, or why none does."""
    pairs = []
    for item in probes.items:
        other = other_pronoun(item.probe)
        if other is None or not item.continuation_ids or not item.distractor_continuation_ids:
            continue
        try:
            swapped = tokenizer.encode(" " + other)
            pronoun = tokenizer.encode(" " + item.probe.pronoun)
        except TokenizerError:
            continue
        clean = item.ids[: item.pronoun_pos + 1]
        answer, wrong = item.continuation_ids[0], item.distractor_continuation_ids[0]
        if pronoun != clean[-1:] or len(swapped) != 1 or answer == wrong:  # one token each, as patching needs
            continue
        pairs.append(Pair(clean, clean[:-1] + swapped, answer, wrong))
        if len(pairs) == most:
            break
    if not pairs:
        return "no pronoun probe makes a pair to patch (a one-token pronoun, another one for the other noun)"
    return ProbeSet(PAIRS, [p.clean for p in pairs], pairs, about=f"{len(pairs)} pronoun pairs, the pronoun swapped")


def other_pronoun(probe: Probe) -> str | None:
    """The pronoun that can refer to the probe's other noun and not to its referent (from the pronoun demo's nouns),
    or for nouns the demo does not know, he for she and she for he."""
    mine, theirs = PRONOUNS_OF.get(probe.referent.lower()), PRONOUNS_OF.get(probe.distractor.lower())
    if mine is not None and theirs is not None:
        return next((pronoun for pronoun in theirs if pronoun not in mine), None)
    return {"he": "she", "she": "he"}.get(probe.pronoun.lower())


def repeat_pairs(pool: Sequence[int], block_size: int, most: int = WATCHED_PAIRS) -> ProbeSet | str:
    """Pairs of repeated random tokens (seeded) whose prompts differ in one token: the clean prompt is L distinct
    tokens followed by their first L/2 again, whose right answer is the token that came next the first time; the
    corrupted one has another token just before that answer in its first copy, so no earlier token follows the last
    one any more. The answer stays where it was, and only where to find it changes: what an induction head's keys
    read from a previous-token head (K-composition), so patching its keys, and the path into them, carry the answer.
    The wrong answer is a token neither prompt holds."""
    tokens = torch.tensor(sorted(set(pool)))
    length = min(20, 2 * block_size // 3, len(tokens) - 2)  # distinct tokens, and two more for the changes
    if length < 4:
        return f"block_size {block_size} or the vocabulary is too small for repeated-token pairs"
    generator, half, pairs = torch.Generator().manual_seed(0), length // 2, []
    while len(pairs) < most:
        order = tokens[torch.randperm(len(tokens), generator=generator)].tolist()
        first, (other, wrong) = order[:length], order[length : length + 2]
        corrupted = first[: half - 1] + [other] + first[half:]
        pairs.append(Pair(first + first[:half], corrupted + first[:half], first[half], wrong))
    about = f"{most} pairs of {length} repeated random tokens, the token before the answer changed in the corrupted one"
    return ProbeSet(PAIRS, [p.clean for p in pairs], pairs, about=about)


def one_token(tokenizer: Tokenizer, text: str, what: str) -> int:
    """The id of `text`, which must encode to exactly one token; `what` names where it was given."""
    try:
        ids = tokenizer.encode(text)
    except TokenizerError as exc:
        raise UserError(f"{what} {text!r}: {exc}") from None
    if len(ids) != 1:
        pieces = ", ".join(repr(tokenizer.decode([i])) for i in ids)
        raise UserError(
            f"{what} {text!r} is {len(ids)} tokens ({pieces}), not one; give a single token, often with its "
            f"leading space, e.g. ' dug'"
        )
    return ids[0]


# --- the runs, and the one patching function ---------------------------------------------------------------------


@dataclass(frozen=True)
class Runs:
    """Every pair's clean run (rows 0..P-1) and corrupted run (rows P..2P-1), in one forward: the ids `idx` [2P, T]
    (right-padded: attention is causal, so the padding is never read), each row's `last` position [2P], the `logits`
    there [2P, vocab] and every site recorded, `cache`."""

    pairs: Sequence[Pair]
    idx: torch.Tensor
    last: torch.Tensor
    logits: torch.Tensor
    cache: Cache

    def diffs(self, logits: torch.Tensor | None = None, pair_of_row: torch.Tensor | None = None) -> torch.Tensor:
        """The logit difference of each row of `logits` (these runs' own by default), right answer minus wrong, of
        the pair `pair_of_row` says (by default pair r for rows r and P + r), in float64 on the CPU."""
        logits = self.logits if logits is None else logits
        if pair_of_row is None:
            pair_of_row = torch.arange(len(self.pairs)).repeat(2)
        answers = torch.tensor([p.answer for p in self.pairs])[pair_of_row]
        wrongs = torch.tensor([p.wrong for p in self.pairs])[pair_of_row]
        rows = torch.arange(len(logits))
        found = logits.detach().double().cpu()
        return found[rows, answers] - found[rows, wrongs]

    @property
    def gaps(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(each pair's clean logit difference, its corrupted one), each [P]."""
        both = self.diffs()
        return both[: len(self.pairs)], both[len(self.pairs) :]


def runs(model: nn.Module, pairs: Sequence[Pair]) -> Runs:
    """Every pair's clean and corrupted prompt run once, every site of the model recorded."""
    device = next(model.parameters()).device
    sequences = [p.clean for p in pairs] + [p.corrupted for p in pairs]
    idx = torch.zeros(len(sequences), max(len(ids) for ids in sequences), dtype=torch.long)
    for row, ids in enumerate(sequences):
        idx[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    idx, last = idx.to(device), torch.tensor([len(ids) - 1 for ids in sequences], device=device)
    logits, cache = model.run_with_cache(idx, sites(model), logits_at=last)
    return Runs(pairs, idx, last, logits, cache)


@dataclass
class Rows:
    """Patched runs, row by row: `pair` [R], the pair whose corrupted prompt each row runs, and what each takes in at
    each site, `takes[site]`: a list of (where [R, ...] bool, the cache it takes from, the row of that cache for each
    row [R]), put in in that order."""

    pair: torch.Tensor
    takes: dict[str, list[tuple[torch.Tensor, Cache, torch.Tensor]]]

    def edits(self, chunk: slice) -> dict[str, Edit]:
        """The edits that run `chunk` of these rows."""

        def edit(site: str, takes: list) -> Edit | None:
            found = []  # each take's rows that take anything, what they take, and where
            for where, source, rows in takes:
                active = where[chunk].flatten(1).any(1).nonzero()[:, 0]
                if len(active):
                    values = source[site][rows[chunk][active].to(source[site].device)]
                    found.append((active, where[chunk][active], values))

            def put(x: torch.Tensor) -> torch.Tensor:
                x = x.clone()
                for active, where, values in found:
                    x[active] = torch.where(where.to(x.device), values.to(x.dtype), x[active])
                return x

            return put if found else None

        edits = {site: edit(site, takes) for site, takes in self.takes.items()}
        return {site: put for site, put in edits.items() if put is not None}

    def first_layers(self) -> torch.Tensor:
        """[R]: the first layer each row changes anything at (its takes' sites' layers; for an MLP's output, the layer
        after, into whose stream it goes: `patched` adds it there)."""
        first = torch.full((len(self.pair),), NO_LAYER, dtype=torch.long)
        for site, takes in self.takes.items():
            # "blocks.{layer}....": an MLP's output is the last the block adds, so the run can start after it
            layer = int(site.split(".")[1]) + site.endswith("hook_mlp_out")
            for where, _, _ in takes:
                touched = where.flatten(1).any(1)
                first[touched] = first[touched].clamp(max=layer)
        return first.masked_fill(first == NO_LAYER, 0)  # a row that changes nothing runs whole

    def reordered(self, order: torch.Tensor) -> Rows:
        """These rows in the order `order` gives."""
        takes = {
            site: [(where[order], source, rows[order]) for where, source, rows in found]
            for site, found in self.takes.items()
        }
        return Rows(self.pair[order], takes)


def patched(model: nn.Module, both: Runs, rows: Rows, *, record: Sequence[str] = ()) -> tuple[torch.Tensor, Cache]:
    """The logit difference [R] of each patched run of `rows` (PATCHED_ROWS a forward), and the sites `record` names,
    recorded from those runs (rows in order). Row r runs pair `rows.pair[r]`'s corrupted prompt. Without `record`, a
    row that changes nothing before layer l starts there, from the corrupted run's stream entering it (the blocks
    before it would compute what the corrupted run did): most of path patching's rows, half of patching's."""
    n_pairs, diffs, recorded = len(both.pairs), [torch.zeros(0, dtype=torch.float64)], {}
    first = rows.first_layers() if not record else torch.zeros(len(rows.pair), dtype=torch.long)
    order = torch.argsort(first, stable=True)
    rows, first = rows.reordered(order), first[order]
    for start in range(0, len(rows.pair), PATCHED_ROWS):
        chunk = slice(start, min(start + PATCHED_ROWS, len(rows.pair)))
        for layer in first[chunk].unique().tolist():  # a forward for each layer the chunk's rows start at
            part = slice(
                chunk.start + int((first[chunk] < layer).sum()), chunk.start + int((first[chunk] <= layer).sum())
            )
            corrupted, edits = (n_pairs + rows.pair[part]).to(both.idx.device), rows.edits(part)
            start_from = both.idx[corrupted] if layer == 0 else stream_entering(both, corrupted, edits, layer)
            logits, cache = model.run_with_cache(
                start_from, record, edits=edits, logits_at=both.last[corrupted], start_at_layer=layer
            )
            diffs.append(both.diffs(logits, rows.pair[part]))
            for name, value in cache.items():
                recorded.setdefault(name, []).append(value)
    return torch.cat(diffs)[torch.argsort(order)], Cache({name: torch.cat(found) for name, found in recorded.items()})


def stream_entering(both: Runs, corrupted: torch.Tensor, edits: Edits, layer: int) -> torch.Tensor:
    """The stream entering block `layer` (past the last block: the final norm's input) for rows running the corrupted
    runs `corrupted` (rows of `both`) with `edits`: the corrupted run's, with what the edits put in the previous
    block's MLP output in place of the corrupted run's."""
    stream = both.cache["resid_post", layer - 1][corrupted]
    site = site_name("mlp_out", layer - 1)
    edit = edits.get(site)
    if edit is not None:
        before = both.cache[site][corrupted]
        stream = stream + (edit(before) - before)
    return stream


def mask_axes(kind: str) -> tuple[str, ...]:
    """The axes of a site's activation a part picks along, after the batch's; the activation's last axis is taken
    whole (a head's features, the model's width, or a pattern row's keys)."""
    if kind == "pattern":
        return ("head", "pos")  # [batch, head, query_pos, key_pos]
    return ("pos", "head") if kind in HEAD_SITES else ("pos",)


def part_rows(parts: Sequence[str], sizes: dict[str, int], source: Cache, n_pairs: int) -> tuple[Rows, list[slice]]:
    """The patched runs of `parts` for `n_pairs` pairs, in one batch: for each part, pair by pair, one row for each
    index of its axes, taking that index of its site from the pair's row of `source` (the clean runs: rows 0..P-1);
    and the rows of each part."""
    counts = [n_pairs * math.prod(sizes[a] for a in PARTS[part].axes) for part in parts]
    total, spans, start = sum(counts), [], 0
    pair, takes = torch.zeros(total, dtype=torch.long), {}
    for part, count in zip(parts, counts, strict=True):
        kind, axes, _ = PARTS[part]
        shape = [sizes[a] for a in axes]
        n = math.prod(shape)
        coords = dict(zip(axes, torch.unravel_index(torch.arange(n), shape), strict=True))
        span = slice(start, start + count)
        pair[span] = torch.arange(n_pairs).repeat_interleave(n)
        for layer in range(sizes["layer"]):
            chosen = (coords["layer"] == layer).nonzero()[:, 0]
            where = torch.zeros(n, *(sizes[a] for a in mask_axes(kind)), 1, dtype=torch.bool)
            where[(chosen, *(coords[a][chosen] if a in axes else slice(None) for a in mask_axes(kind)))] = True
            whole = torch.zeros(total, *where.shape[1:], dtype=torch.bool)
            whole[span] = where.repeat(n_pairs, *[1] * (where.dim() - 1))
            takes.setdefault(site_name(kind, layer), []).append((whole, source, pair))
        spans.append(span)
        start += count
    return Rows(pair, takes), spans


def sizes_of(model: nn.Module, length: int) -> dict[str, int]:
    return {"layer": model.config.n_layer, "head": model.config.n_head, "pos": length}


def parts_of(model: nn.Module, parts: Sequence[str]) -> list[str]:
    """`parts`, less those whose site the model lacks (an attention-only model has no MLPs)."""
    return [part for part in parts if site_name(PARTS[part].site, 0) in sites(model)]


def share_of_mean(brought_back: torch.Tensor, gap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The share [...] of the pairs' mean logit difference each part carries, from what patching it brings back of
    each pair's gap [P, ...] and the gaps [P] (clean minus corrupted), and its spread, two standard errors over the
    pairs (the delta method). The share of the mean, as TransformerLens's batch metric is, not the mean of each
    pair's share: a pair whose two differences are nearly equal would divide by nearly 0 and swamp the rest. NaN
    both where the mean gap is not above its own spread (for one pair: below MIN_GAP): the model does not tell the
    clean prompts from the corrupted ones (early in training, say), so there is no answer for a part to carry."""
    n, mean_gap = len(gap), gap.mean()
    axes = [1] * (brought_back.dim() - 1)
    share = brought_back.mean(0) / mean_gap
    not_measured = torch.full_like(share, float("nan"))
    if not gap_measured(gap):
        return not_measured, not_measured
    if n < 2:  # one pair: its share, without a spread
        return share, not_measured
    residuals = brought_back - share * gap.view(-1, *axes)  # what the share leaves unexplained, pair by pair
    return share, 2 * residuals.std(0) / (n**0.5 * mean_gap.abs())


def gap_measured(gap: torch.Tensor) -> bool:
    """Whether the pairs' mean gap [P] is above its spread (one pair's: at least MIN_GAP): what a share needs."""
    return bool(gap.mean() >= MIN_GAP) if len(gap) < 2 else bool(gap.mean() > max(gap_spread(gap), MIN_GAP / len(gap)))


def gap_spread(gap: torch.Tensor) -> float:
    """The spread of the pairs' mean gap: two standard errors (infinite for one pair)."""
    return float(2 * gap.std() / len(gap) ** 0.5) if len(gap) > 1 else math.inf


# --- the three analyses ----------------------------------------------------------------------------------------


def analyse(model: nn.Module, pair: Pair) -> Patching:
    """Every figure of `pair`: the clean and corrupted runs (one forward), then every patched run, batched."""
    both = runs(model, [pair])
    clean, corrupted = both.gaps
    brought_back = {part: found[0] for part, found in brought_back_by(model, both, parts_of(model, PARTS)).items()}
    shares = {part: share_of_mean(found[None], clean - corrupted)[0] for part, found in brought_back.items()}
    attributed = {name: one_pair(value) for name, value in attribution(model, both).items()}
    return Patching(pair, float(clean), float(corrupted), shares, brought_back, attributed, logit_lens(model, both))


def brought_back_by(
    model: nn.Module, both: Runs, parts: Sequence[str], *, measured_only: bool = False
) -> dict[str, torch.Tensor]:
    """What patching each of `parts` from the clean runs brings back of each pair's logit difference, [P, *its axes]
    (patched minus corrupted), every patched run in one batch. With `measured_only`, zeros and no run while the pairs'
    mean gap is not above its spread: no share is measured then (early in training), so the watch patches nothing."""
    sizes, (clean, corrupted) = sizes_of(model, both.idx.shape[1]), both.gaps
    rows, spans = part_rows(parts, sizes, both.cache, len(both.pairs))
    skip = measured_only and not gap_measured(clean - corrupted)
    diffs = torch.zeros(len(rows.pair), dtype=torch.float64) if skip else patched(model, both, rows)[0]
    shapes = {part: [sizes[a] for a in PARTS[part].axes] for part in parts}
    return {
        part: diffs[span].view(len(both.pairs), *shapes[part]) - corrupted.view(-1, *[1] * len(shapes[part]))
        for part, span in zip(parts, spans, strict=True)
    }


def one_pair(value: torch.Tensor | None) -> torch.Tensor | float | None:
    """A figure of a batch of one pair, for that pair: a tensor of its own shape, or a number."""
    if value is None:
        return None
    return float(value[0]) if value.dim() == 1 else value[0]


def first_analysis(model: nn.Module, sets: ProbeSets) -> Patching | None:
    """The whole analysis of the first of the pairs the watch patches (for the attention page), None without any."""
    pairs = sets.get(PAIRS)
    return analyse(model, pairs.items[0]) if pairs is not None and len(pairs) else None


def watched(model: nn.Module, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
    """What the watch reads of several pairs (of any lengths) at every pass: for each of `WATCHED_PARTS`, patched from
    the clean run at every position, the share of the pairs' mean logit difference it brings back and its spread
    (`share_of_mean`), by `WATCHED_NAMES` ("patching" and "patching_spread" for the heads' outputs, [layer, head]; one
    number a layer for the MLPs, "patching_mlps0", ...); and "attribution", each head's direct logit attribution in
    the clean run averaged over the pairs. A forward for each layer the patched runs start at (`patched`)."""
    both = runs(model, pairs)
    clean, corrupted = both.gaps
    found = {"attribution": attribution(model, both)["heads"].mean(0)}
    for part, brought_back in brought_back_by(model, both, parts_of(model, WATCHED_PARTS), measured_only=True).items():
        share, spread = share_of_mean(brought_back, clean - corrupted)
        if share.dim() == 2:  # [layer, head]
            found[WATCHED_NAMES[part]], found[f"{WATCHED_NAMES[part]}_spread"] = share, spread
        else:  # one number a layer: "patching_mlps0", ...
            for layer in range(len(share)):
                found[f"{WATCHED_NAMES[part]}{layer}"] = share[layer]
                found[f"{WATCHED_NAMES[part]}{layer}_spread"] = spread[layer]
    return found


@dataclass(frozen=True)
class Mean:
    """The figures of several pairs together: `shares[part]` and `spreads[part]` for the parts every pair has (those
    patched at every position), by `share_of_mean`; `attribution` {"heads", "mlps"}, the pairs' mean (logits); the
    pairs' mean gap and its spread, and whether it is measured."""

    shares: dict[str, torch.Tensor]
    spreads: dict[str, torch.Tensor]
    attribution: dict[str, torch.Tensor | None]
    gap: float
    gap_spread: float
    pairs: int

    @property
    def measured(self) -> bool:
        return bool(self.shares) and not all(bool(share.isnan().all()) for share in self.shares.values())


def mean_over(found: Sequence[Patching]) -> Mean:
    """`found`'s pairs together, by the one rule (`share_of_mean`)."""
    gaps = torch.tensor([f.clean_diff - f.corrupted_diff for f in found], dtype=torch.float64)
    shares, spreads = {}, {}
    for part in (p for p in found[0].shares if "pos" not in PARTS[p].axes):
        shares[part], spreads[part] = share_of_mean(torch.stack([f.brought_back[part] for f in found]), gaps)
    mlps = [f.attribution["mlps"] for f in found]
    attributed = {
        "heads": torch.stack([f.attribution["heads"] for f in found]).mean(0),
        "mlps": torch.stack(mlps).mean(0) if mlps[0] is not None else None,
    }
    return Mean(shares, spreads, attributed, float(gaps.mean()), gap_spread(gaps), len(found))


# --- attribution and the logit lens, read from the clean runs -----------------------------------------------------


def final_scale(model: nn.Module, final: torch.Tensor) -> torch.Tensor:
    """The final norm's divisor for the residual streams `final` [B, d]: LayerNorm's standard deviation (with its
    epsilon), or RMSNorm's root mean square."""
    norm = model.ln_f
    if norm.weight is None:  # RMSNorm, no centring; F.rms_norm's default epsilon
        return (final.pow(2).mean(-1, keepdim=True) + torch.finfo(final.dtype).eps).sqrt()
    centred = final - final.mean(-1, keepdim=True)
    return (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()


def attribution(model: nn.Module, both: Runs) -> dict[str, torch.Tensor | None]:
    """Each pair's direct logit attribution in its clean run at its last position, in logits: "heads" [P, layer,
    head], each head's `z · W_O` (no output bias); "mlps" [P, layer] (None without MLPs); "embeddings", "biases" (the
    output projections'), "norm_bias" (the final norm's), each [P]. They add up to each pair's clean logit
    difference."""
    cfg, pairs, cache = model.config, both.pairs, both.cache
    rows, at = torch.arange(len(pairs), device=both.last.device), both.last[: len(pairs)]
    with torch.no_grad():
        W_U = model.lm_head.weight
        direction = (W_U[[p.answer for p in pairs]] - W_U[[p.wrong for p in pairs]])[:, None]  # [P, 1, d]
        final = cache["resid_post", cfg.n_layer - 1][rows, at]
        scale, norm = final_scale(model, final)[:, None], model.ln_f  # [P, 1, 1]

        def logits_of(part: torch.Tensor) -> torch.Tensor:
            """Parts [P, n, d] of the last streams, through the final norm as each stream went, onto `direction`:
            [P, n]."""
            if norm.weight is not None:  # LayerNorm centres; RMSNorm does not
                part = (part - part.mean(-1, keepdim=True)) * norm.weight
            return ((part / scale) * direction).sum(-1)

        heads, mlps, biases = [], [], torch.zeros_like(final)
        for layer, block in enumerate(model.blocks):
            W_O = block.attn.out_proj.weight.view(cfg.n_embd, cfg.n_head, cfg.head_dim)  # [d, H, head_dim]
            results = torch.einsum("phk,dhk->phd", cache["z", layer][rows, at], W_O)  # each head's write [P, H, d]
            heads.append(logits_of(results))
            if block.attn.out_proj.bias is not None:
                biases = biases + block.attn.out_proj.bias
            if block.mlp is not None:
                mlps.append(logits_of(cache["mlp_out", layer][rows, at][:, None])[:, 0])
        norm_bias = (direction[:, 0] * norm.bias).sum(-1) if norm.bias is not None else torch.zeros(len(pairs))
        return {
            "heads": torch.stack(heads, 1).double().cpu(),
            "mlps": torch.stack(mlps, 1).double().cpu() if mlps else None,
            "embeddings": logits_of(cache["resid_pre", 0][rows, at][:, None])[:, 0].double().cpu(),
            "biases": logits_of(biases[:, None])[:, 0].double().cpu(),
            "norm_bias": norm_bias.double().cpu(),
        }


def logit_lens(model: nn.Module, both: Runs) -> list[tuple[int, float]]:
    """The first pair's right answer's rank (1: the top token) and probability when its clean run's residual stream
    after each layer is read as if it were the last."""
    answer, last = both.pairs[0].answer, int(both.last[0])
    streams = torch.stack([both.cache["resid_post", layer][0, last] for layer in range(model.config.n_layer)])
    with torch.no_grad():
        logits = model.lm_head(model.ln_f(streams)).float()  # [layer, vocab]
    probabilities = logits.softmax(-1)[:, answer]
    ranks = 1 + (logits > logits[:, answer : answer + 1]).sum(-1)
    return [(int(rank), float(p)) for rank, p in zip(ranks, probabilities, strict=True)]


# --- what it says, as numbers ------------------------------------------------------------------------------------


def by_name(values: torch.Tensor) -> dict[str, float | list[float]]:
    """[layer, head, ...] -> {"L0H0": value (or list), ...}; [layer] -> {"MLP0": value}; [layer, pos] (no head
    axis: a part of the stream) -> {"L0": [value, ...]}."""
    if values.dim() == 1:
        return {f"MLP{layer}": float(value) for layer, value in enumerate(values)}
    return {
        head_name(layer, head): values[layer, head].tolist()
        for layer in range(values.shape[0])
        for head in range(values.shape[1])
    }


def part_json(part: str, values: torch.Tensor) -> dict:
    """One part's figures by name: heads as "L0H0" (a list by position where it has one), MLPs as "MLP0", the
    residual stream and MLPs by position as "L0": [value, ...]."""
    if "pos" in PARTS[part].axes and "head" not in PARTS[part].axes:
        return {f"L{layer}": values[layer].tolist() for layer in range(values.shape[0])}
    return by_name(values)


def patching_json(found: Patching, tokenizer: Tokenizer) -> dict:
    """One pair's figures as `sample.py --patch --json` prints them (docs/patching.md); NaN where a share is not
    measured (`Patching.measured`)."""
    pair, parts = found.pair, found.attribution
    return {
        "clean": tokenizer.decode(pair.clean),
        "corrupted": tokenizer.decode(pair.corrupted),
        "clean_ids": pair.clean,
        "corrupted_ids": pair.corrupted,
        "tokens": tokenizer.token_strings(pair.clean),
        "corrupted_tokens": tokenizer.token_strings(pair.corrupted),
        "answer": tokenizer.decode([pair.answer]),
        "wrong": tokenizer.decode([pair.wrong]),
        "answer_id": pair.answer,
        "wrong_id": pair.wrong,
        "clean_diff": found.clean_diff,
        "corrupted_diff": found.corrupted_diff,
        "measured": found.measured,
        "patching": {part: part_json(part, values) for part, values in found.shares.items()},
        "attribution": {
            **attribution_json(parts),
            "embeddings": parts["embeddings"],
            "biases": parts["biases"],
            "norm_bias": parts["norm_bias"],
        },
        "logit_lens": [
            {"layer": layer, "rank": rank, "probability": probability}
            for layer, (rank, probability) in enumerate(found.lens)
        ],
    }


def mean_json(mean: Mean) -> dict:
    """Several pairs' figures together, as `sample.py --patch FILE --json` prints them beside each pair's."""
    return {
        "patching": {part: part_json(part, share) for part, share in mean.shares.items()},
        "patching_spread": {part: part_json(part, spread) for part, spread in mean.spreads.items()},
        "measured": mean.measured,
        "pairs": mean.pairs,
        "mean_gap": mean.gap,
        "mean_gap_spread": mean.gap_spread,
        "attribution": attribution_json(mean.attribution),
    }


def attribution_json(attributed: dict) -> dict:
    """The heads' attribution by name ("L0H0") and the MLPs' by layer ("L0"; none without MLPs)."""
    mlps = attributed["mlps"] if attributed["mlps"] is not None else []
    return {"heads": by_name(attributed["heads"]), "mlps": {f"L{layer}": float(v) for layer, v in enumerate(mlps)}}
