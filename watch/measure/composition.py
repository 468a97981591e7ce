"""How heads work together: Q-, K- and V-composition (Elhage et al. 2021, *A Mathematical Framework for
Transformer Circuits*), read from the weights alone as TransformerLens's `all_composition_scores` computes them.

In the row-vector convention, head `a` writes `x · W_OV^a` (W_OV = W_V · W_O) into the residual stream, and a head
`b` of a later layer reads it through its queries, its keys (W_QK = W_Q · W_Kᵀ) or its values:

    Q-composition   ‖W_OV^a · W_QK^b‖    / (‖W_OV^a‖ · ‖W_QK^b‖)
    K-composition   ‖W_OV^a · (W_QK^b)ᵀ‖ / (‖W_OV^a‖ · ‖W_QK^b‖)
    V-composition   ‖W_OV^a · W_OV^b‖    / (‖W_OV^a‖ · ‖W_OV^b‖)

It is 0 when `a` writes only into directions `b` ignores and 1 for a rank-1 pair that matches; random matrices of
gptwatch's sizes score a few tenths, which is why a score is shown beside the untrained model's. An induction head
is a K-composition: its keys read what a previous-token head wrote. As in TransformerLens on gptwatch's export, the
layer norms, biases, MLPs, relative position biases, QK-norm and rotary positions are not in it; where `a` writes
nothing (the "modern" architecture zero-initialises W_O) the ratio is 0/0, which TransformerLens leaves as NaN and
is 0 here: a head that writes nothing composes with nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import torch
import torch.nn as nn

from watch.measure.heads import head_name

KINDS = ("Q", "K", "V")
ONE_LAYER_NOTE = "composition needs two layers: this model has one, so no head reads another's output"


def composition_scores(model: nn.Module) -> dict[str, torch.Tensor]:
    """{"Q" | "K" | "V": [layer_from, head_from, layer_to, head_to]} (float64, CPU): the composition of
    every head with every head of a later layer, 0 where layer_to <= layer_from, as TransformerLens lays it out.

    `GPT` keeps each `nn.Linear` as [out, in], head h in rows h·d_head..(h+1)·d_head of W_query/W_key/W_value and
    in those columns of out_proj. A norm is taken of a product with a factor R of m = Q·R in place of m (‖m·N‖ =
    ‖R·N‖, as Q's columns are orthonormal), which shrinks d_model to d_head in every product."""
    cfg = model.config
    H, D, E = cfg.n_head, cfg.head_dim, cfg.n_embd

    def stacked(weight_of) -> torch.Tensor:  # [layer, head, ...], float64 on the CPU
        return torch.stack([weight_of(block.attn).detach().to("cpu", torch.float64) for block in model.blocks])

    def triangle(m: torch.Tensor) -> torch.Tensor:
        return torch.linalg.qr(m, mode="r")[1]

    W_Q, W_K, W_V = (
        stacked(lambda attn, name=name: getattr(attn, name).weight.reshape(H, D, E).transpose(1, 2))
        for name in ("W_query", "W_key", "W_value")
    )
    W_O = stacked(lambda attn: attn.out_proj.weight.t().reshape(H, D, E))
    writer = triangle(W_V) @ W_O  # the norm of W_OV·N for every N
    writer_norm = torch.linalg.matrix_norm(writer)  # [L, H]
    n_layer, n_head = writer_norm.shape
    # What a later head reads the stream through, M = X·Yᵀ, as X · R(Y)ᵀ: W_QK, (W_QK)ᵀ and W_OV.
    readers = {
        "Q": W_Q @ triangle(W_K).transpose(-1, -2),
        "K": W_K @ triangle(W_Q).transpose(-1, -2),
        "V": W_V @ triangle(W_O.transpose(-1, -2)).transpose(-1, -2),
    }
    out = {}
    for kind, reader in readers.items():
        reader_norm = torch.linalg.matrix_norm(reader)  # [L, H]
        scores = torch.zeros(n_layer, n_head, n_layer, n_head, dtype=torch.float64)
        for layer in range(n_layer - 1):
            product = torch.einsum("hde,mkef->hmkdf", writer[layer], reader[layer + 1 :])  # [H, L', H, D, D]
            norm = torch.linalg.matrix_norm(product)  # [H, L', H]
            scale = writer_norm[layer][:, None, None] * reader_norm[layer + 1 :][None]
            # 0/0 (a head that writes or reads nothing) is 0; weights that overflowed stay NaN
            scores[layer, :, layer + 1 :] = torch.where(scale == 0, 0.0, norm / scale.where(scale != 0, 1.0))
        out[kind] = scores
    return out


def pair_name(source: str, target: str) -> str:
    """("L0H1", "L1H3") -> "L0H1->L1H3": L0H1's output, read by L1H3."""
    return f"{source}->{target}"


@dataclass(frozen=True)
class Composition:
    """A model's composition scores, `scores[kind]` [layer_from, head_from, layer_to, head_to], and `pairs[kind]`
    the same for every pair whose target is in a later layer, by name ({"L0H1->L1H3": score}), sources in order."""

    scores: dict[str, torch.Tensor]
    pairs: dict[str, dict[str, float]]

    def best(self, kind: str) -> tuple[str, float]:
        """The pair with the highest score (earliest first on ties)."""
        pairs = self.pairs[kind]
        name = max(pairs, key=pairs.get)
        return name, pairs[name]

    def sources(self, kind: str, target: tuple[int, int]) -> list[tuple[str, float]]:
        """The heads `target` reads from, highest score first (earliest first on ties)."""
        layer, head = target
        column = self.scores[kind][:layer, :, layer, head].tolist()  # [layer_from][head_from]
        found = [(head_name(a, h), value) for a, row in enumerate(column) for h, value in enumerate(row)]
        return sorted(found, key=lambda item: -item[1])


def composition(model: nn.Module) -> Composition | None:
    """The model's composition scores; None for a one-layer model, where no head reads another's output
    (`ONE_LAYER_NOTE` says so)."""
    if model.config.n_layer < 2:
        return None
    # Matrices this small are fastest on one thread, and on a busy machine a second thread can wait
    # tens of milliseconds for a core at every product; the caller's thread count is restored after.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            scores = composition_scores(model)
    finally:
        torch.set_num_threads(threads)
    heads = list(product(range(model.config.n_layer), range(model.config.n_head)))
    pairs = [(a, h, b, k) for (a, h), (b, k) in product(heads, heads) if b > a]  # sources in order
    names = [pair_name(head_name(a, h), head_name(b, k)) for a, h, b, k in pairs]
    index = tuple(torch.tensor(pairs).T)  # the pairs' [layer_from, head_from, layer_to, head_to], as four columns
    return Composition(scores, {kind: dict(zip(names, v[index].tolist(), strict=True)) for kind, v in scores.items()})


def composition_json(found: Composition | None, untrained: Composition | None) -> dict:
    """The scores as `sample.py --heads --json` gives them, the model's and the untrained model's `pairs`; for a
    one-layer model both are None and "composition_note" says why."""
    if found is None:
        return {"composition": None, "composition_untrained": None, "composition_note": ONE_LAYER_NOTE}
    return {"composition": found.pairs, "composition_untrained": untrained.pairs if untrained else None}


def reads_from(found: Composition | None, untrained: Composition | None) -> dict:
    """What the attention page shows for a selected head: per kind, per head of a later layer, the heads it
    reads from, highest first, as [name, score, the untrained model's score or None]."""
    if found is None:
        return {}
    n_layer, n_head = found.scores["K"].shape[:2]
    targets = [(layer, head) for layer in range(1, n_layer) for head in range(n_head)]
    rounded = (
        {kind: {pair: round(v, 4) for pair, v in untrained.pairs[kind].items()} for kind in KINDS} if untrained else {}
    )
    return {
        kind: {
            head_name(*target): [
                [source, round(value, 4), rounded.get(kind, {}).get(pair_name(source, head_name(*target)))]
                for source, value in found.sources(kind, target)
            ]
            for target in targets
        }
        for kind in KINDS
    }
