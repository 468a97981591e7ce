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

The two runs are recorded through the readable path (`GPT.forward_with_attention`) with forward pre-hooks on the
modules that receive what is read: `ln_1` receives the residual stream entering a layer, the output projection the
heads' outputs `z` side by side, `ln_f` the last residual stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from data.probes import PatchPair, load_jsonl
from data.tokenizer import Tokenizer
from errors import UserError
from model.ablation import Patch
from model.attention import HeadPatch
from model.gpt import evaluating
from watch.measure.heads import head_name

PATCHED_ROWS = 512  # patched runs one forward takes: the demo's pair needs 116, GPT-2 small's of 10 tokens 1,872
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
    """What one run of a batch of prompts leaves, read at the last position: `logits` [B, vocab]; per layer the
    residual stream entering it, `resid` [B, T, d], the heads' outputs `z` [B, H, T, head_dim] and the `patterns`
    [B, H, T, T]; `final` [B, d], the residual stream the final norm receives."""

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
        greedy = record(model, torch.tensor([clean_ids, corrupted_ids])).logits.argmax(-1).tolist()
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


def record(model: nn.Module, idx: torch.Tensor, patch: Patch | None = None) -> Run:
    """One forward of `idx` [B, T] through the readable path (with `patch` applied), recorded."""
    n_head = model.config.n_head
    at = torch.full((idx.shape[0],), idx.shape[1] - 1, device=idx.device)
    with evaluating(model), recorded(model) as found:
        logits, patterns = model.forward_with_attention(idx, logits_at=at, patch=patch)
    z = [merged.unflatten(-1, (n_head, -1)).transpose(1, 2) for merged in found["z"]]  # [B, T, H*d] -> [B, H, T, d]
    return Run(logits.float(), found["resid"], z, patterns, found["final"][0])


# --- the three analyses ----------------------------------------------------------------------------------------


def analyse(model: nn.Module, pair: Pair) -> Patching:
    """Every figure of `pair`: the clean and corrupted runs (one forward), then every patched run, batched."""
    device = next(model.parameters()).device
    both = record(model, torch.tensor([pair.clean, pair.corrupted], device=device))
    clean_diff, corrupted_diff = (float(d) for d in both.diff(pair))
    restored = patched_diffs(model, pair, both)
    spread = clean_diff - corrupted_diff
    shares = {
        part: (diffs - corrupted_diff) / spread if abs(spread) > SAME_DIFF else torch.full_like(diffs, float("nan"))
        for part, diffs in restored.items()
    }
    return Patching(
        pair,
        clean_diff,
        corrupted_diff,
        shares["heads"],
        shares["positions"],
        shares["residual"],
        shares["patterns"],
        attribution(model, pair, both),
        logit_lens(model, pair, both),
    )


def patched_diffs(model: nn.Module, pair: Pair, both: Run) -> dict[str, torch.Tensor]:
    """The corrupted run's logit difference with each part of the clean run patched in, by part (`PARTS`): a batch
    row per patched run, so that every row of a forward patches its own head, position or layer."""
    n_layer, n_head, T = model.config.n_layer, model.config.n_head, len(pair.clean)
    shapes = {"heads": (n_layer, n_head), "positions": (n_layer, n_head, T), "residual": (n_layer, T)}
    shapes["patterns"] = (n_layer, n_head)
    rows = sum(torch.Size(shape).numel() for shape in shapes.values())
    masks = patch_masks(n_layer, n_head, T, rows)
    corrupted = torch.tensor([pair.corrupted], device=both.logits.device)
    diffs = []
    for start in range(0, rows, PATCHED_ROWS):
        chunk = slice(start, min(start + PATCHED_ROWS, rows))
        n = chunk.stop - chunk.start
        patch = Patch(
            heads={
                layer: HeadPatch(
                    masks["z"][layer][chunk],
                    both.z[layer][:1].expand(n, -1, -1, -1),
                    masks["weights"][layer][chunk],
                    both.patterns[layer][:1].expand(n, -1, -1, -1),
                )
                for layer in range(n_layer)
            },
            residual={
                layer: (masks["resid"][layer][chunk], both.resid[layer][:1].expand(n, -1, -1))
                for layer in range(n_layer)
            },
        )
        diffs.append(record(model, corrupted.expand(n, -1), patch).diff(pair))
    flat = torch.cat(diffs).cpu()
    out, start = {}, 0
    for part, shape in shapes.items():
        size = torch.Size(shape).numel()
        out[part] = flat[start : start + size].reshape(shape).double()
        start += size
    return out


def patch_masks(n_layer: int, n_head: int, T: int, rows: int) -> dict[str, list[torch.Tensor]]:
    """Which row patches what, per layer: "z" [rows, H, T] (heads' outputs), "weights" [rows, H] (patterns), "resid"
    [rows, T] (the residual stream entering the layer). Rows in `PARTS` order: each head at every position, each
    head at each position, the residual stream at each layer and position, each head's pattern."""
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
    assert row == rows, (row, rows)
    return {"z": z, "weights": weights, "resid": resid}


def final_scale(model: nn.Module, final: torch.Tensor) -> torch.Tensor:
    """The final norm's divisor for the residual streams `final` [B, d]: LayerNorm's standard deviation (with its
    epsilon), or RMSNorm's root mean square."""
    norm = model.ln_f
    if norm.weight is None:  # RMSNorm, no centring; F.rms_norm's default epsilon
        return (final.pow(2).mean(-1, keepdim=True) + torch.finfo(final.dtype).eps).sqrt()
    centred = final - final.mean(-1, keepdim=True)
    return (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()


def attribution(model: nn.Module, pair: Pair, both: Run) -> dict[str, torch.Tensor | float | None]:
    """The clean run's direct logit attribution at the last position, in logits: every head's `z · W_O` (no output
    bias), every MLP, the embeddings, the output biases and the final norm's bias, which add up to the clean logit
    difference."""
    cfg = model.config
    with torch.no_grad():
        direction = model.lm_head.weight[pair.answer] - model.lm_head.weight[pair.wrong]  # [d]
        final = both.final[:1]  # [1, d]
        scale = final_scale(model, final)
        weight = model.ln_f.weight if model.ln_f.weight is not None else torch.ones_like(direction)
        centre = model.ln_f.weight is not None

        def logits_of(part: torch.Tensor) -> torch.Tensor:
            """Parts [..., d] of the last stream, through the final norm as the stream went, onto `direction`."""
            if centre:
                part = part - part.mean(-1, keepdim=True)
            return (part / scale.squeeze(0) * weight) @ direction

        heads, mlps, biases = [], [], torch.zeros_like(direction)
        for layer, block in enumerate(model.blocks):
            W_O = block.attn.out_proj.weight.view(cfg.n_embd, cfg.n_head, cfg.head_dim)  # [d, H, head_dim]
            z = both.z[layer][0, :, -1]  # [H, head_dim]
            results = torch.einsum("hk,dhk->hd", z, W_O)  # each head's write into the stream [H, d]
            bias = block.attn.out_proj.bias if block.attn.out_proj.bias is not None else torch.zeros_like(direction)
            heads.append(logits_of(results))
            biases = biases + bias
            if block.mlp is not None:
                entering_mlp = both.resid[layer][0, -1] + results.sum(0) + bias
                after = both.resid[layer + 1][0, -1] if layer + 1 < cfg.n_layer else final[0]
                mlps.append(logits_of(after - entering_mlp))
        norm_bias = float(model.ln_f.bias @ direction) if model.ln_f.bias is not None else 0.0
        return {
            "heads": torch.stack(heads).double().cpu(),
            "mlps": torch.stack(mlps).double().cpu() if mlps else None,
            "embeddings": float(logits_of(both.resid[0][0, -1])),
            "biases": float(logits_of(biases)),
            "norm_bias": norm_bias,
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
