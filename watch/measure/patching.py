"""Which head carries the answer: activation patching, direct logit attribution and the logit lens, on a pair of
prompts of equal token length, a *clean* one and a *corrupted* one whose next tokens differ ("The big dog fetched
the big ball and she" → " dug"; "... and it" → " bounced").

The figure everything is measured by is the *logit difference*: the logit of the right answer (the clean prompt's
next token) minus that of the wrong one (the corrupted prompt's), at the last position.

- **Activation patching** runs the corrupted prompt with one part of the clean run put in its place (a `Patch`,
  model/ablation.py) and asks how much of the clean logit difference comes back: 0 is the corrupted run's, 1 the
  clean run's, as TransformerLens's patching helpers report it with that metric. The parts: each head's output `z`
  (before the output projection) at every position, and at each position alone; the residual stream entering each
  layer at each position (`resid_pre`); each head's attention pattern. Every patched run of a pair goes through the
  model in one batch (`PATCHED_ROWS` rows at most per forward).
- **Direct logit attribution** splits the clean run's last residual stream into what each part wrote (the embeddings,
  each head's `z · W_O` without the output bias, the output biases, each MLP) and puts each through the final norm
  as the whole stream went through it (centred, divided by the whole stream's scale, times the norm's weight) and
  onto the answer's direction `W_U[right] - W_U[wrong]`: logits each part adds to the difference. The parts and the
  final norm's bias add up to the clean logit difference.
- **The logit lens** reads the residual stream after each layer as if it were the last (final norm, unembedding):
  the right answer's rank there (0: the top token) and its probability.

`analyse` gives all of it for one pair (`sample.py --patch`); `watched`, what the watch logs at every pass, gives
each head's share and attribution averaged over many pairs (`PAIRS`, made by `pronoun_pairs` or `repeat_pairs`).

The two runs are recorded through the readable path (`GPT.forward_with_attention`) with forward pre-hooks on the
modules that receive what is read: `ln_1` receives the residual stream entering a layer, the output projection the
heads' outputs `z` side by side, `ln_f` the last residual stream.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from common.errors import UserError
from data.probes import PatchPair, Probe, load_jsonl
from data.pronouns import PRONOUNS_OF
from data.tokenizer import Tokenizer, TokenizerError
from model.ablation import Patch
from model.attention import HeadPatch
from model.gpt import evaluating
from watch.measure.heads import head_name
from watch.measure.probesets import ProbeSet, ProbeSets

PAIRS = "pairs"  # the kind of probe set the watch patches (`watch.measure.reading.PROBE_KINDS`)
WATCHED_PAIRS = 16  # pairs a watch pass patches: its figures are means over them
PATCHED_ROWS = 512  # patched runs one forward takes: the demo's pair needs 116, GPT-2 small's of 10 tokens 1,848
PARTS = ("heads", "positions", "residual", "patterns")  # what is patched, in the order the rows are batched
SAME_DIFF = 1e-6  # clean and corrupted logit differences closer than this leave nothing to restore


@dataclass(frozen=True)
class Pair:
    """A clean and a corrupted prompt of equal token length, and the two answers: `answer` the right one (the clean
    prompt's next token), `wrong` the corrupted one's."""

    clean: list[int]
    corrupted: list[int]
    answer: int
    wrong: int


@dataclass(frozen=True)
class Run:
    """What one run of a batch of prompts leaves: `logits` [B, vocab] at each row's last position; per layer the
    residual stream entering it, `resid` [B, T, d], the heads' outputs `z` [B, H, T, head_dim] and the `patterns`
    [B, H, T, T]; `final` [B, d], the residual stream the final norm receives at each row's last position."""

    logits: torch.Tensor
    resid: list[torch.Tensor]
    z: list[torch.Tensor]
    patterns: list[torch.Tensor]
    final: torch.Tensor

    def diff(self, pair: Pair) -> torch.Tensor:
        """The logit difference [B], right answer minus wrong."""
        return self.logits[:, pair.answer] - self.logits[:, pair.wrong]


@dataclass(frozen=True)
class Patching:
    """One pair's figures. Shares are normalised: 0 the corrupted run's logit difference, 1 the clean run's (NaN
    when the two are the same). `heads` [layer, head] patched at every position; `positions` [layer, head, pos];
    `residual` [layer, pos]; `patterns` [layer, head]; `attribution` {"heads": [layer, head], "mlps": [layer] (None
    for an attention-only model), "embeddings", "biases", "norm_bias"} in logits; `lens` [(rank, probability)] of the
    right answer after each layer."""

    pair: Pair
    clean_diff: float
    corrupted_diff: float
    heads: torch.Tensor
    positions: torch.Tensor
    residual: torch.Tensor
    patterns: torch.Tensor
    attribution: dict[str, torch.Tensor | float | None]
    lens: list[tuple[int, float]]

    def carriers(self, least: float = 0.1) -> list[tuple[str, float]]:
        """The heads whose output, patched at every position, brings back at least `least` of the clean difference,
        highest share first."""
        n_layer, n_head = self.heads.shape
        found = [
            (head_name(layer, head), float(self.heads[layer, head]))
            for layer in range(n_layer)
            for head in range(n_head)
            if self.heads[layer, head] >= least
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
) -> Pair:
    """The pair of these texts, its answers the tokens given (each must be one token) or else the greedy next tokens
    of the clean and of the corrupted prompt. `UserError`, in one line, for what cannot be patched."""
    clean_ids, corrupted_ids = tokenizer.encode(clean), tokenizer.encode(corrupted)
    if not clean_ids or not corrupted_ids:
        raise UserError("the clean and the corrupted prompt each need at least one token; give two non-empty texts")
    if len(clean_ids) != len(corrupted_ids):
        raise UserError(
            f"the clean prompt has {len(clean_ids)} tokens and the corrupted one {len(corrupted_ids)}; patching "
            f"copies position by position, so change words for words of as many tokens"
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
        greedy = record(model, idx, torch.full((2,), len(clean_ids) - 1, device=device)).logits.argmax(-1).tolist()
    answer_id = one_token(tokenizer, answer, "--answer") if answer is not None else greedy[0]
    wrong_id = one_token(tokenizer, wrong, "--wrong") if wrong is not None else greedy[1]
    if answer_id == wrong_id:
        shown = tokenizer.decode([answer_id])
        raise UserError(
            f"the right and the wrong answer are the same token {shown!r}: nothing to tell apart; give "
            f"--answer and --wrong, two different next tokens"
        )
    return Pair(clean_ids, corrupted_ids, answer_id, wrong_id)


def pairs_from_file(model: nn.Module, tokenizer: Tokenizer, path: str | Path) -> list[Pair]:
    """The pairs of a JSONL file of `PatchPair`s (data/probes.py), each checked as `pair_for` checks it; a problem is
    one line naming the file's line."""
    pairs = []
    for item in load_jsonl(path, PatchPair):
        try:
            pairs.append(pair_for(model, tokenizer, item.clean, item.corrupted, item.answer, item.wrong))
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


def repeat_pairs(pool: Sequence[int], block_size: int, most: int = WATCHED_PAIRS // 2) -> ProbeSet | str:
    """Pairs of repeated random tokens (seeded): the clean prompt is L tokens followed by their first L/2 again, whose
    right answer is the token that came next the first time; the corrupted one has other tokens for its first copy,
    and its wrong answer is what came next in that copy. An induction head carries the answer."""
    length = min(20, 2 * block_size // 3)
    if length < 4 or len(set(pool)) < 2:
        return f"block_size {block_size} or the vocabulary is too small for repeated-token pairs"
    tokens = torch.tensor(sorted(set(pool)))
    generator = torch.Generator().manual_seed(0)
    pairs, half = [], length // 2
    while len(pairs) < most:
        first, other = (tokens[torch.randint(len(tokens), (length,), generator=generator)].tolist() for _ in range(2))
        if first[half] != other[half]:
            pairs.append(Pair(first + first[:half], other + first[:half], first[half], other[half]))
    about = f"{most} repeated-token pairs, {length} random tokens then their first {half} again"
    return ProbeSet(PAIRS, [p.clean for p in pairs], pairs, about=about)


def one_token(tokenizer: Tokenizer, text: str, what: str) -> int:
    """The id of `text`, which must encode to exactly one token."""
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        pieces = ", ".join(repr(tokenizer.decode([i])) for i in ids)
        raise UserError(
            f"{what} {text!r} is {len(ids)} tokens ({pieces}), not one; give a single token, often with its "
            f"leading space, e.g. ' dug'"
        )
    return ids[0]


# --- running and recording -----------------------------------------------------------------------------------


@contextmanager
def recorded(model: nn.Module) -> Iterator[dict[str, list]]:
    """Inside, each forward's residual streams entering the layers ("resid"), the heads' outputs ("z") and the
    stream the final norm receives ("final"), kept as the modules receive them."""
    found: dict[str, list] = {"resid": [], "z": [], "final": []}
    keep = lambda name: lambda module, args: found[name].append(args[0])  # noqa: E731 (a hook per kind)
    hooks = [model.ln_f.register_forward_pre_hook(keep("final"))]
    for block in model.blocks:
        hooks.append(block.ln_1.register_forward_pre_hook(keep("resid")))
        hooks.append(block.attn.out_proj.register_forward_pre_hook(keep("z")))
    try:
        yield found
    finally:
        for hook in hooks:
            hook.remove()


def record(model: nn.Module, idx: torch.Tensor, last: torch.Tensor, patch: Patch | None = None) -> Run:
    """One forward of `idx` [B, T] through the readable path (with `patch` applied), recorded, its logits read at
    each row's `last` position [B] (a row may be right-padded after it: attention is causal)."""
    n_head = model.config.n_head
    with evaluating(model), recorded(model) as found:
        logits, patterns = model.forward_with_attention(idx, logits_at=last, patch=patch)
    z = [merged.unflatten(-1, (n_head, -1)).transpose(1, 2) for merged in found["z"]]  # [B, T, H*d] -> [B, H, T, d]
    return Run(logits.float(), found["resid"], z, patterns, found["final"][0])


def padded(sequences: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N, T] right-padded with 0s, each sequence's last position [N])."""
    idx = torch.zeros(len(sequences), max(len(ids) for ids in sequences), dtype=torch.long)
    for row, ids in enumerate(sequences):
        idx[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return idx.to(device), torch.tensor([len(ids) - 1 for ids in sequences], device=device)


def clean_and_corrupted(model: nn.Module, pairs: Sequence[Pair]) -> tuple[Run, torch.Tensor, torch.Tensor]:
    """Every pair's clean run (rows 0..P-1) and corrupted run (rows P..2P-1) in one forward: (that run, the ids,
    each row's last position)."""
    device = next(model.parameters()).device
    idx, last = padded([p.clean for p in pairs] + [p.corrupted for p in pairs], device)
    return record(model, idx, last), idx, last


def shares_of(diffs: torch.Tensor, clean: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """Logit differences [P, ...] of patched runs as shares of each pair's way from its corrupted difference (0) to
    its clean one (1); NaN for a pair whose two differences are the same."""
    spread = (clean - corrupted).view(-1, *[1] * (diffs.dim() - 1))
    share = (diffs - corrupted.view_as(spread)) / spread
    return share.where(spread.abs() > SAME_DIFF, torch.full_like(share, float("nan")))


def patched(model: nn.Module, both: Run, idx: torch.Tensor, last: torch.Tensor, rows: Rows) -> torch.Tensor:
    """The logit difference [R] of each patched run of `rows`, PATCHED_ROWS runs a forward. `both`, `idx` and `last`
    are `clean_and_corrupted`'s: row r runs pair `rows.pair[r]`'s corrupted prompt with its clean run's parts put in
    where `rows.z`, `rows.weights` and `rows.resid` say."""
    n_pairs, n_layer, device = len(idx) // 2, model.config.n_layer, idx.device
    diffs = []
    for start in range(0, len(rows.pair), PATCHED_ROWS):
        chunk = slice(start, min(start + PATCHED_ROWS, len(rows.pair)))
        clean = rows.pair[chunk].to(device)  # the clean row each patched run takes its parts from
        z, weights, resid = ([masks[chunk].to(device) for masks in kind] for kind in (rows.z, rows.weights, rows.resid))
        heads = {
            layer: HeadPatch(
                *((z[layer], both.z[layer][clean]) if z else (None, None)),
                *((weights[layer], both.patterns[layer][clean]) if weights else (None, None)),
            )
            for layer in range(n_layer)
        }
        residual = {layer: (resid[layer], both.resid[layer][clean]) for layer in range(len(resid))}
        run = record(model, idx[n_pairs + clean], last[n_pairs + clean], Patch(heads=heads, residual=residual))
        answers, wrongs = rows.answers[chunk, None].to(device), rows.wrongs[chunk, None].to(device)
        diffs.append(run.logits.gather(1, answers)[:, 0] - run.logits.gather(1, wrongs)[:, 0])
    return torch.cat(diffs).double().cpu()


# --- the three analyses ----------------------------------------------------------------------------------------


def analyse(model: nn.Module, pair: Pair) -> Patching:
    """Every figure of `pair`: the clean and corrupted runs (one forward), then every patched run, batched."""
    both, idx, last = clean_and_corrupted(model, [pair])
    clean_diff, corrupted_diff = (float(d) for d in both.diff(pair))
    n_layer, n_head, T = model.config.n_layer, model.config.n_head, len(pair.clean)
    shapes = {"heads": (n_layer, n_head), "positions": (n_layer, n_head, T), "residual": (n_layer, T)}
    shapes["patterns"] = (n_layer, n_head)
    rows = every_part(n_layer, n_head, T, pair)
    flat = patched(model, both, idx, last, rows)
    shares, start = {}, 0
    for part, shape in shapes.items():
        size = torch.Size(shape).numel()
        diffs = flat[start : start + size].reshape(1, *shape)
        shares[part] = shares_of(diffs, torch.tensor([clean_diff]), torch.tensor([corrupted_diff]))[0]
        start += size
    return Patching(
        pair,
        clean_diff,
        corrupted_diff,
        shares["heads"],
        shares["positions"],
        shares["residual"],
        shares["patterns"],
        {name: one_pair(value) for name, value in attribution(model, [pair], both, last).items()},
        logit_lens(model, pair, both),
    )


def first_analysis(model: nn.Module, sets: ProbeSets) -> Patching | None:
    """The whole analysis of the first of the pairs the watch patches (for the attention page), None without any."""
    pairs = sets.get(PAIRS)
    return analyse(model, pairs.items[0]) if pairs is not None and len(pairs) else None


def one_pair(value: torch.Tensor | None) -> torch.Tensor | float | None:
    """A figure of a batch of one pair, for that pair: a tensor of its own shape, or a number."""
    if value is None:
        return None
    return float(value[0]) if value.dim() == 1 else value[0]


def watched(model: nn.Module, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
    """What the watch reads of several pairs (of any lengths) at every pass, each [layer, head] and averaged over
    the pairs: "patching", the share of the pairs' mean logit difference each head's output brings back, patched
    from the clean run at every position, and its spread, "patching_spread" (`share_of_mean`), and "attribution",
    each head's direct logit attribution in the clean run. Two forwards, unless the patched runs exceed PATCHED_ROWS."""
    both, idx, last = clean_and_corrupted(model, pairs)
    n_pairs, n_layer, n_head = len(pairs), model.config.n_layer, model.config.n_head
    answers = torch.tensor([p.answer for p in pairs], device=idx.device)
    wrongs = torch.tensor([p.wrong for p in pairs], device=idx.device)
    diffs = (
        both.logits.gather(1, answers.repeat(2)[:, None])[:, 0] - both.logits.gather(1, wrongs.repeat(2)[:, None])[:, 0]
    )
    clean, corrupted = diffs[:n_pairs].double().cpu(), diffs[n_pairs:].double().cpu()
    rows = each_head(n_layer, n_head, idx.shape[1], answers, wrongs)
    brought_back = patched(model, both, idx, last, rows).view(n_pairs, n_layer, n_head) - corrupted.view(-1, 1, 1)
    share, spread = share_of_mean(brought_back, clean - corrupted)
    heads = attribution(model, pairs, both, last)["heads"].mean(0)
    return {"patching": share, "patching_spread": spread, "attribution": heads}


def share_of_mean(brought_back: torch.Tensor, gap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's share [layer, head] of the pairs' mean logit difference, from what patching brings back of each
    pair's gap [P, layer, head] and the gaps [P] (clean minus corrupted), and its spread, two standard errors over
    the pairs (the delta method). The share of the mean, as TransformerLens's batch metric is, not the mean of each
    pair's share: a pair whose two differences are nearly equal would divide by nearly 0 and swamp the rest. NaN
    both where the mean gap is not above its own spread: the model does not yet tell the clean prompts from the
    corrupted ones (early in training), so there is no answer for a head to carry."""
    n, mean_gap = len(gap), gap.mean()
    share = brought_back.mean(0) / mean_gap
    not_measured = torch.full_like(share, float("nan"))
    if n < 2:  # one pair: its share, without a spread
        return (share if mean_gap > SAME_DIFF else not_measured), not_measured
    residuals = brought_back - share * gap.view(-1, 1, 1)  # what the share leaves unexplained, pair by pair
    spread = 2 * residuals.std(0) / (n**0.5 * mean_gap.abs())
    if mean_gap <= max(float(2 * gap.std() / n**0.5), SAME_DIFF):
        return not_measured, not_measured
    return share, spread


@dataclass(frozen=True)
class Rows:
    """The patched runs of a batch, row by row: `pair` [R], the pair whose clean run each row takes its parts from
    (and whose corrupted prompt it runs); `answers`, `wrongs` [R], its answers; per layer, which of the clean run's
    parts it takes: `z` [R, H, T] (heads' outputs), `weights` [R, H] (patterns), `resid` [R, T] (the residual stream
    entering the layer); an empty list where no row takes that kind of part."""

    pair: torch.Tensor
    answers: torch.Tensor
    wrongs: torch.Tensor
    z: list[torch.Tensor]
    weights: list[torch.Tensor]
    resid: list[torch.Tensor]


def every_part(n_layer: int, n_head: int, T: int, pair: Pair) -> Rows:
    """The rows of one pair's full analysis, in `PARTS` order: each head at every position, each head at each
    position, the residual stream at each layer and position, each head's pattern."""
    rows = n_layer * n_head * (2 + T) + n_layer * T
    z = [torch.zeros(rows, n_head, T, dtype=torch.bool) for _ in range(n_layer)]
    weights = [torch.zeros(rows, n_head, dtype=torch.bool) for _ in range(n_layer)]
    resid = [torch.zeros(rows, T, dtype=torch.bool) for _ in range(n_layer)]
    row = 0
    for layer in range(n_layer):  # heads, at every position
        for head in range(n_head):
            z[layer][row, head, :] = True
            row += 1
    for layer in range(n_layer):  # heads, at each position
        for head in range(n_head):
            for pos in range(T):
                z[layer][row, head, pos] = True
                row += 1
    for layer in range(n_layer):  # the residual stream, at each layer and position
        for pos in range(T):
            resid[layer][row, pos] = True
            row += 1
    for layer in range(n_layer):  # patterns
        for head in range(n_head):
            weights[layer][row, head] = True
            row += 1
    only = torch.zeros(rows, dtype=torch.long)  # every row patches the one pair
    return Rows(only, only + pair.answer, only + pair.wrong, z, weights, resid)


def each_head(n_layer: int, n_head: int, T: int, answers: torch.Tensor, wrongs: torch.Tensor) -> Rows:
    """The rows of each pair's heads, each patched at every position: pair by pair, layer by layer, head by head."""
    n_pairs, per_pair = len(answers), n_layer * n_head
    row = torch.arange(n_pairs * per_pair)
    layer_of, head_of = (row // n_head) % n_layer, row % n_head
    z = [torch.zeros(len(row), n_head, T, dtype=torch.bool) for _ in range(n_layer)]
    for layer in range(n_layer):
        chosen = layer_of == layer
        z[layer][chosen, head_of[chosen]] = True
    pair = (row // per_pair).to(answers.device)
    return Rows(pair, answers[pair], wrongs[pair], z, [], [])


def final_scale(model: nn.Module, final: torch.Tensor) -> torch.Tensor:
    """The final norm's divisor for the residual streams `final` [B, d]: LayerNorm's standard deviation (with its
    epsilon), or RMSNorm's root mean square."""
    norm = model.ln_f
    if norm.weight is None:  # RMSNorm, no centring; F.rms_norm's default epsilon
        return (final.pow(2).mean(-1, keepdim=True) + torch.finfo(final.dtype).eps).sqrt()
    centred = final - final.mean(-1, keepdim=True)
    return (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()


def attribution(
    model: nn.Module, pairs: Sequence[Pair], both: Run, last: torch.Tensor
) -> dict[str, torch.Tensor | None]:
    """Each pair's direct logit attribution in its clean run (rows 0..P-1 of `both`) at its last position, in
    logits: "heads" [P, layer, head], each head's `z · W_O` (no output bias); "mlps" [P, layer] (None without MLPs);
    "embeddings", "biases" (the output projections'), "norm_bias" (the final norm's), each [P]. They add up to each
    pair's clean logit difference."""
    n_pairs = len(pairs)
    rows, at = torch.arange(n_pairs, device=last.device), last[:n_pairs]
    with torch.no_grad():
        W_U = model.lm_head.weight
        direction = (W_U[[p.answer for p in pairs]] - W_U[[p.wrong for p in pairs]])[:, None]  # [P, 1, d]
        scale = final_scale(model, both.final[:n_pairs])[:, None]  # [P, 1, 1]
        norm = model.ln_f

        def logits_of(part: torch.Tensor) -> torch.Tensor:
            """Parts [P, n, d] of the last streams, through the final norm as each stream went, onto `direction`:
            [P, n]."""
            if norm.weight is not None:  # LayerNorm centres; RMSNorm does not
                part = (part - part.mean(-1, keepdim=True)) * norm.weight
            return ((part / scale) * direction).sum(-1)

        heads, mlps = [], []
        biases = torch.zeros_like(both.final[:n_pairs])
        for layer, block in enumerate(model.blocks):
            cfg = model.config
            W_O = block.attn.out_proj.weight.view(cfg.n_embd, cfg.n_head, cfg.head_dim)  # [d, H, head_dim]
            z = both.z[layer][rows, :, at]  # [P, H, head_dim]
            results = torch.einsum("phk,dhk->phd", z, W_O)  # each head's write into the stream [P, H, d]
            bias = block.attn.out_proj.bias if block.attn.out_proj.bias is not None else torch.zeros_like(biases[0])
            heads.append(logits_of(results))
            biases = biases + bias
            if block.mlp is not None:
                entering_mlp = both.resid[layer][rows, at] + results.sum(1) + bias
                after = both.resid[layer + 1][rows, at] if layer + 1 < cfg.n_layer else both.final[:n_pairs]
                mlps.append(logits_of((after - entering_mlp)[:, None])[:, 0])
        norm_bias = (direction[:, 0] * norm.bias).sum(-1) if norm.bias is not None else torch.zeros(n_pairs)  # [P]
        return {
            "heads": torch.stack(heads, 1).double().cpu(),
            "mlps": torch.stack(mlps, 1).double().cpu() if mlps else None,
            "embeddings": logits_of(both.resid[0][rows, at][:, None])[:, 0].double().cpu(),
            "biases": logits_of(biases[:, None])[:, 0].double().cpu(),
            "norm_bias": norm_bias.double().cpu(),
        }


def logit_lens(model: nn.Module, pair: Pair, both: Run) -> list[tuple[int, float]]:
    """The right answer's rank (0: the top token) and probability when the clean run's residual stream after each
    layer is read as if it were the last."""
    n_layer = model.config.n_layer
    streams = [both.resid[layer][0, -1] for layer in range(1, n_layer)] + [both.final[0]]
    with torch.no_grad():
        logits = model.lm_head(model.ln_f(torch.stack(streams))).float()  # [layer, vocab]
    probabilities = logits.softmax(-1)[:, pair.answer]
    ranks = (logits > logits[:, pair.answer : pair.answer + 1]).sum(-1)
    return [(int(rank), float(p)) for rank, p in zip(ranks, probabilities, strict=True)]


# --- what it says, as numbers ------------------------------------------------------------------------------------


def mean_of(found: list[Patching]) -> dict[str, torch.Tensor | None]:
    """The figures of every head and MLP averaged over several pairs (of any lengths), by name: "heads" and
    "patterns" (shares), "attribution heads" and "attribution mlps" (logits; None for an attention-only model)."""
    means = {part: torch.stack([getattr(f, part) for f in found]).mean(0) for part in ("heads", "patterns")}
    means["attribution heads"] = torch.stack([f.attribution["heads"] for f in found]).mean(0)
    mlps = [f.attribution["mlps"] for f in found]
    means["attribution mlps"] = torch.stack(mlps).mean(0) if mlps[0] is not None else None
    return means


def by_head(values: torch.Tensor) -> dict[str, float | list[float]]:
    """[layer, head, ...] -> {"L0H0": value (or list), ...}."""
    return {
        head_name(layer, head): values[layer, head].tolist()
        for layer in range(values.shape[0])
        for head in range(values.shape[1])
    }


def patching_json(found: Patching, tokenizer: Tokenizer) -> dict:
    """One pair's figures as `sample.py --patch --json` prints them (docs/patching.md); NaN where a share has no
    meaning (the two runs' logit differences are the same)."""
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
        "patching": {
            "heads": by_head(found.heads),
            "positions": by_head(found.positions),
            "residual": {f"L{layer}": found.residual[layer].tolist() for layer in range(found.residual.shape[0])},
            "patterns": by_head(found.patterns),
        },
        "attribution": {
            "heads": by_head(parts["heads"]),
            "mlps": {f"L{layer}": float(v) for layer, v in enumerate(parts["mlps"])}
            if parts["mlps"] is not None
            else {},
            "embeddings": parts["embeddings"],
            "biases": parts["biases"],
            "norm_bias": parts["norm_bias"],
        },
        "logit_lens": [
            {"layer": layer, "rank": rank, "probability": probability}
            for layer, (rank, probability) in enumerate(found.lens)
        ],
    }
