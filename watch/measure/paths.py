"""Which head feeds which: path patching (Wang et al. 2022, the IOI circuit), on the pairs activation patching
reads (`watch/measure/patching.py`), in its denoising direction, through the same named sites and the same one
patching function.

For each *sender* head and each pair:
1. the corrupted prompt runs with the sender's output `z` (every position) taken from the clean run and every other
   head's output frozen at its corrupted value, the MLPs recomputed; what each receiver reads is recorded;
2. the corrupted prompt runs again, everything recomputed, but for one *receiver*'s input, taken from run 1:
   - a head of a later layer: its queries, keys or values alone (its slice of `hook_q`, `hook_k` or `hook_v`, what
     its layer norm and projection make of the stream run 1 left there: TransformerLens's `hook_q_input` with
     `use_split_qkv_input`);
   - an MLP of the sender's layer or later: its input, the stream after its layer's attention in run 1 (its output,
     `hook_mlp_out`, as run 1 made it, is that input's);
3. the share of the clean logit difference that brings back: 0 the corrupted run's, 1 the clean run's.
The logits are a receiver too: the sender's clean output added alone to the corrupted run's final residual stream
(its change, `(z_clean - z_corrupted) · W_O` at the last position), through the final norm and the unembedding.

Over several pairs a path's share is the share of the pairs' mean difference, with its spread, and none while the
mean is not above its spread: `patching.share_of_mean`, the rule every share follows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from model.hooks import site_name
from watch.measure import patching
from watch.measure.heads import head_name
from watch.measure.patching import PATHS, WATCHED_NAMES, Pair, Rows, Runs, patched, runs, share_of_mean
from watch.measure.probesets import ProbeSet

INPUTS = ("q", "k", "v")  # what a receiving head reads a sender through: its queries, keys or values
NOISE = 0.01  # a share below this is not called a path, whatever its spread (one pair has none)
# The most heads a model may have for a pass to read its paths: beyond, every pass would run thousands of rows a pair
# (GPT-2 small's 144 heads: about 2,400 a sender); `sample.py --patch FILE --paths` reads them on pairs of one's own.
MAX_HEADS = 64


def worth_reading(model: nn.Module) -> bool:
    """Whether a pass reads the model's paths: a model of at most MAX_HEADS heads."""
    return model.config.n_layer * model.config.n_head <= MAX_HEADS


@dataclass(frozen=True)
class Path:
    """One path's figures: from `sender` ("L0H1") to `receiver` ("L1H1", "MLP0" or "logits") through `input` ("q",
    "k", "v", "mlp" or "logits"): the `share` of the clean logit difference it brings back, and its `spread` (NaN for
    one pair, or while no share is measured)."""

    sender: str
    receiver: str
    input: str
    share: float
    spread: float

    @property
    def name(self) -> str:
        """ "L0H1->L1H1 k": the sender's output read by the receiver, through this input."""
        return f"{self.sender}->{self.receiver} {self.input}"

    @property
    def measured(self) -> bool:
        return self.share == self.share

    @property
    def clear(self) -> bool:
        """Measured, above its spread (a path the pairs show, not one their draw could have made up) and above
        NOISE."""
        return bool(above_spread(self.share, self.spread))


def receivers(model: nn.Module, layer: int) -> list[tuple[str, str, str, int | None]]:
    """What reads a sender of `layer`, in order: (receiver, input, site, head) for each head of a later layer and each
    of its three inputs, then each MLP of this layer or later (head None)."""
    cfg, found = model.config, []
    for later in range(layer + 1, cfg.n_layer):
        for head in range(cfg.n_head):
            found += [(head_name(later, head), kind, site_name(kind, later), head) for kind in INPUTS]
    if model.blocks[0].mlp is not None:
        found += [(f"MLP{m}", "mlp", site_name("mlp_out", m), None) for m in range(layer, cfg.n_layer)]
    return found


def path_patching(
    model: nn.Module,
    both: Runs,
    senders: Sequence[tuple[int, int]] | None = None,
    read: Collection[tuple[str, str]] | None = None,
) -> list[Path]:
    """Every path from `senders` (every head by default) with its share over the pairs `both` ran: sender by sender,
    each sender's receivers in order (`receivers`; only the (receiver, input) pairs `read` names, if given), then
    the logits."""
    cfg, n_pairs = model.config, len(both.pairs)
    if senders is None:
        senders = [(layer, head) for layer in range(cfg.n_layer) for head in range(cfg.n_head)]
    if not senders:
        return []
    edges = [
        (s, *receiver)
        for s, (layer, _) in enumerate(senders)
        for receiver in receivers(model, layer)
        if read is None or receiver[:2] in read
    ]
    through = torch.zeros(n_pairs, 0, dtype=torch.float64)
    if edges:
        feeding = sorted({s for s, *_ in edges})  # step 1 runs for the senders that have a receiver to read them
        steps = sender_rows(model, both, [senders[s] for s in feeding])
        frozen = patched(model, both, steps, record=sorted({site for *_, site, _ in edges}))[1]  # what step 2 reads
        pair = torch.arange(n_pairs).repeat_interleave(len(edges))  # row p * E + e: pair p, edge e
        sender = torch.tensor([feeding.index(s) for s, *_ in edges], dtype=torch.long).repeat(n_pairs)
        wheres: dict[str, torch.Tensor] = {}
        for e, (_, _, _, site, head) in enumerate(edges):
            if site not in wheres:
                shape = (len(pair), 1, cfg.n_head, 1) if head is not None else (len(pair), 1, 1)
                wheres[site] = torch.zeros(shape, dtype=torch.bool)
            wheres[site][e :: len(edges), :, head if head is not None else slice(None)] = True
        source = pair * len(feeding) + sender  # the row of step 1 each row takes its receiver's input from
        diffs, _ = patched(model, both, Rows(pair, {site: [(where, frozen, source)] for site, where in wheres.items()}))
        through = diffs.view(n_pairs, len(edges))
    clean, corrupted = both.gaps
    direct = direct_to_logits(model, both, senders)  # [P, sender]
    shares, spreads = share_of_mean(torch.cat([through, direct], 1) - corrupted[:, None], clean - corrupted)
    names = [(s, head_name(*senders[s]), receiver, kind) for s, receiver, kind, _, _ in edges]
    names += [(s, head_name(*at), "logits", "logits") for s, at in enumerate(senders)]
    found = sorted(zip(names, shares.tolist(), spreads.tolist(), strict=True), key=lambda item: item[0][0])
    return [Path(*name[1:], share, spread) for name, share, spread in found]


def sender_rows(model: nn.Module, both: Runs, senders: Sequence[tuple[int, int]]) -> Rows:
    """Step 1 for every pair and sender (row pair * S + sender): the corrupted prompt with every head's output frozen
    at its corrupted value but the sender's, taken from the clean run."""
    cfg, n_pairs = model.config, len(both.pairs)
    pair = torch.arange(n_pairs).repeat_interleave(len(senders))
    sender = torch.arange(len(senders)).repeat(n_pairs)
    takes = {}
    for layer in range(cfg.n_layer):
        mine = torch.zeros(len(pair), 1, cfg.n_head, 1, dtype=torch.bool)
        for s, (at, head) in enumerate(senders):
            if at == layer:
                mine[sender == s, :, head] = True
        everywhere = torch.ones(len(pair), 1, 1, 1, dtype=torch.bool)
        takes[site_name("z", layer)] = [(everywhere, both.cache, n_pairs + pair), (mine, both.cache, pair)]
    return Rows(pair, takes)


def direct_to_logits(model: nn.Module, both: Runs, senders: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The logit difference [P, sender] when each sender's clean output is added alone to the corrupted run's final
    residual stream at its last position, through the final norm and the unembedding."""
    cfg, n_pairs = model.config, len(both.pairs)
    clean, corrupted = torch.arange(n_pairs), n_pairs + torch.arange(n_pairs)
    final = both.cache["resid_post", cfg.n_layer - 1][corrupted, both.last[corrupted]]  # [P, d]
    rows = []
    with torch.no_grad():
        for layer, head in senders:
            z = both.cache["z", layer]
            change = z[clean, both.last[clean], head] - z[corrupted, both.last[corrupted], head]  # [P, head_dim]
            W_O = model.blocks[layer].attn.out_proj.weight.view(cfg.n_embd, cfg.n_head, cfg.head_dim)[:, head]
            rows.append(model.lm_head(model.ln_f(final + change @ W_O.T)))  # [P, vocab]
    logits = torch.stack(rows, 1)  # [P, sender, vocab]
    pair_of = torch.arange(n_pairs).repeat_interleave(len(senders))
    return both.diffs(logits.reshape(n_pairs * len(senders), -1), pair_of).view(n_pairs, len(senders))


def watched(model: nn.Module, pairs: Sequence[Pair], found: dict[str, torch.Tensor | float]) -> list[Path]:
    """The paths the watch reads of its pairs at every pass, as Wang et al. follow a circuit: from the heads whose
    output carries a share above its spread (and NOISE) in `found`, activation patching's figures of the same pairs
    (`patching.watched`'s, read first in the same pass; of these pairs when not there), into the head inputs (queries,
    keys, values) and MLPs whose patching carries one too. A head whose whole output carries nothing has no path that
    does, nor has an input that carries nothing a path into it, short of paths that cancel; the pass reads a few
    paths where every path would take it several times as long."""
    found = found if "patching" in found else patching.watched(model, pairs)
    senders = [(int(layer), int(head)) for layer, head in carrying(found, "patching").nonzero()]
    read = {
        (head_name(int(layer), int(head)), kind)
        for kind, part in zip(INPUTS, ("queries", "keys", "values"), strict=True)
        for layer, head in carrying(found, WATCHED_NAMES[part]).nonzero()
    }
    read |= {
        (f"MLP{layer}", "mlp")
        for layer in range(model.config.n_layer)
        if f"{WATCHED_NAMES['mlps']}{layer}" in found and carrying(found, f"{WATCHED_NAMES['mlps']}{layer}")
    }
    return path_patching(model, runs(model, pairs), senders, read) if senders else []


def carrying(found: dict[str, torch.Tensor | float], name: str) -> torch.Tensor:
    """Where the share `found[name]` is above its spread `found[name + "_spread"]` (`above_spread`)."""
    return above_spread(found[name], found[f"{name}_spread"])


def above_spread(share: torch.Tensor | float, spread: torch.Tensor | float) -> torch.Tensor:
    """Where a share is measured and above both its spread (NaN for one pair: none) and NOISE: a share the pairs
    show, not one their draw could have made up. The one rule for a sender, a receiver and a path."""
    spread = torch.nan_to_num(torch.as_tensor(spread), nan=0.0)
    return torch.as_tensor(share) > spread.clamp(min=NOISE)


def on(pairs: ProbeSet | str) -> ProbeSet | str:
    """The watch's pairs as the set its paths are read on (or why there are none)."""
    return replace(pairs, kind=PATHS) if isinstance(pairs, ProbeSet) else pairs
