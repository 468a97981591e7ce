"""A GPT: token and position embeddings, a stack of pre-norm transformer blocks built
around `SelfAttention`, a final norm and an output head tied to the token embedding.

Two architectures share this file:
- "gpt2" (default, for teaching): learned positions, LayerNorm, GELU MLP.
- "modern": rotary positions, QK-norm, parameter-free RMSNorm, ReLU² MLP and
  zero-initialised output projections, which trains faster at small scale.

Data takes one of three paths through it, the three paths of `SelfAttention`:
`forward` (training, evaluation), `forward_with_attention` (the readable path, returning
every layer's attention pattern) and `decode` (sampling with a KV cache).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.attention import KVCache, SelfAttention, rows_linear

ARCHITECTURES = ("gpt2", "modern")
Ablation = dict[int, list[int]]  # layer -> heads whose output is zeroed


@dataclass
class GPTConfig:
    """The model's sizes; `validate` is the one place their rules live."""

    vocab_size: int
    block_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False  # biases in LayerNorm, output projections and MLP
    arch: str = "gpt2"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first impossible value and what would do."""
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"'{name}' must be a positive integer; got {value}")
        if self.n_embd % self.n_head:
            multiple = self.n_head * (self.n_embd // self.n_head + 1)
            raise ValueError(f"'n_embd' must be a multiple of 'n_head' ({self.n_head}), so every head gets an "
                             f"equal share; got {self.n_embd}, e.g. use {multiple}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"'dropout' must be in [0, 1); got {self.dropout}")
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"'arch' must be one of {', '.join(ARCHITECTURES)}; got {self.arch!r}")

    @property
    def modern(self) -> bool:
        return self.arch == "modern"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


MODEL_FIELDS = tuple(f.name for f in fields(GPTConfig))


class Norm(nn.Module):
    """LayerNorm (optional bias) for "gpt2"; parameter-free RMSNorm for "modern"."""

    def __init__(self, dim: int, config: GPTConfig) -> None:
        super().__init__()
        self.modern = config.modern
        self.dim = dim
        if not self.modern:
            self.weight = nn.Parameter(torch.ones(dim))
            self.bias = nn.Parameter(torch.zeros(dim)) if config.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.modern:
            return F.rms_norm(x, (self.dim,))
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, 1e-5)

    def decode(self, x: torch.Tensor, weights: tuple) -> torch.Tensor:
        """`forward` on the plain tensors `decode_weights` gathered."""
        if self.modern:
            return F.rms_norm(x, (self.dim,))
        return F.layer_norm(x, (self.dim,), weights[0], weights[1], 1e-5)

    def decode_weights(self) -> tuple:
        return () if self.modern else (self.weight, self.bias)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.modern = config.modern

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        return F.relu(h).square() if self.modern else F.gelu(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.activation(self.c_fc(x))))

    def decode(self, x: torch.Tensor, weights: tuple, residual: torch.Tensor) -> torch.Tensor:
        """`residual + forward(x)` for rows [N, n_embd] on the plain tensors `decode_weights`
        gathered, without dropout (sampling never trains)."""
        fc_t, fc_bias, proj_t, proj_bias = weights
        return rows_linear(self.activation(rows_linear(x, fc_t, fc_bias)), proj_t, proj_bias, residual)

    def decode_weights(self) -> tuple:
        return self.c_fc.weight.t(), self.c_fc.bias, self.c_proj.weight.t(), self.c_proj.bias


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = Norm(config.n_embd, config)
        self.attn = SelfAttention(config.n_embd, config.n_embd, config.n_head, config.dropout,
                                  out_proj=True, bias=config.bias, rotary=config.modern, qk_norm=config.modern,
                                  max_len=config.block_size)
        self.ln_2 = Norm(config.n_embd, config)
        self.mlp = MLP(config)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, head_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.resid_dropout(self.attn(self.ln_1(x), head_mask=head_mask))
        return x + self.mlp(self.ln_2(x))

    def forward_with_weights(self, x: torch.Tensor, head_mask: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        attended, pattern = self.attn.forward_with_weights(self.ln_1(x), head_mask=head_mask)
        x = x + self.resid_dropout(attended)
        return x + self.mlp(self.ln_2(x)), pattern

    def decode(self, x: torch.Tensor, cache: KVCache, layer: int, weights: tuple,
               head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`forward` for rows [B * T, n_embd] through the cache (see `SelfAttention.decode`), on
        the plain tensors `decode_weights` gathered. The residual additions happen inside the
        matmuls: for a sampled token each extra operation costs as much as the maths.
        `head_mask` ablates heads as in `forward`."""
        ln_1, attn, ln_2, mlp = weights
        x = self.attn.decode(self.ln_1.decode(x, ln_1), cache, layer, attn, residual=x, head_mask=head_mask)
        return self.mlp.decode(self.ln_2.decode(x, ln_2), mlp, residual=x)

    def decode_weights(self) -> tuple:
        return (self.ln_1.decode_weights(), self.attn.decode_weights(), self.ln_2.decode_weights(),
                self.mlp.decode_weights())


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        # "modern" encodes position by rotating queries and keys instead.
        self.wpe = None if config.modern else nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = Norm(config.n_embd, config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix reads and writes tokens
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        # Projections that write into the residual stream: scaled down (GPT-2) so
        # the stream's variance does not grow with depth, or zero ("modern") so
        # each block starts as the identity.
        for block in self.blocks:
            for proj in (block.attn.out_proj, block.mlp.c_proj):
                if self.config.modern:
                    nn.init.zeros_(proj.weight)
                else:
                    nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; position embeddings excluded by default, as GPT-2 reports it.
        (The token embedding is shared with the head, so it counts once.)"""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.wpe is not None:
            n -= self.wpe.weight.numel()
        return n

    # --- training, evaluation, watching ------------------------------------------------

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *,
                ablate: Ablation | None = None, all_logits: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx [B, T] token ids -> (logits, loss).

        With targets, logits cover every position and loss is the mean
        cross-entropy. Without, only the last position goes through the head
        (all a sampler needs) unless `all_logits` is set.
        """
        x = self._embed(idx)
        for block, mask in zip(self.blocks, self._head_masks(ablate, idx.device), strict=True):
            x = block(x, head_mask=mask)
        x = self.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
            return logits, loss
        return (self.lm_head(x) if all_logits else self.lm_head(x[:, -1:, :])), None

    def forward_with_attention(self, idx: torch.Tensor, *, ablate: Ablation | None = None,
                               logits_at: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The readable path through every layer: (logits at every position,
        one attention pattern [batch, head, query_pos, key_pos] per layer). With `logits_at`
        ([batch] positions), the logits [batch, vocab] at those positions only: the output
        head over every position is most of the work when a caller reads one row each."""
        x = self._embed(idx)
        patterns = []
        for block, mask in zip(self.blocks, self._head_masks(ablate, idx.device), strict=True):
            x, pattern = block.forward_with_weights(x, head_mask=mask)
            patterns.append(pattern)
        if logits_at is not None:
            x = x[torch.arange(x.shape[0], device=x.device), logits_at]
        return self.lm_head(self.ln_f(x)), patterns

    def _embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        T = idx.shape[1]
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than block_size="
                             f"{self.config.block_size}; crop the input or train with a larger block_size")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(start, start + T, device=idx.device))
        return self.drop(x)

    def _head_masks(self, ablate: Ablation | None, device: torch.device) -> list[torch.Tensor | None]:
        masks: list[torch.Tensor | None] = [None] * self.config.n_layer
        for layer, heads in (ablate or {}).items():
            if not 0 <= layer < self.config.n_layer or any(not 0 <= h < self.config.n_head for h in heads):
                raise ValueError(f"cannot ablate layer {layer} heads {heads}: the model has "
                                 f"{self.config.n_layer} layers of {self.config.n_head} heads (L0H0 first)")
            mask = torch.ones(self.config.n_head, device=device)
            mask[list(heads)] = 0.0
            masks[layer] = mask
        return masks

    # --- sampling ------------------------------------------------------------------------

    def new_cache(self, batch: int) -> KVCache:
        cfg = self.config
        return KVCache(cfg.n_layer, batch, cfg.n_head, cfg.block_size, cfg.head_dim, self.wte.weight.device,
                       self.wte.weight.dtype)

    def decode(self, idx: torch.Tensor, cache: KVCache, head_masks: list[torch.Tensor | None] | None = None
               ) -> torch.Tensor:
        """Logits [B, vocab] for the position after idx [B, T], whose tokens follow the
        `cache.length` positions the cache holds; adds them to the cache. `head_masks` (from
        `_head_masks`, one per layer) ablates heads as `forward`'s `ablate` does.

        The layers see the B x T positions as rows of a 2-D tensor (see `SelfAttention.decode`),
        and read plain tensors gathered once per generation (`KVCache.weights`)."""
        B, T = idx.shape
        start = cache.length
        if start + T > self.config.block_size:
            raise ValueError(f"the KV cache is full ({self.config.block_size} positions); re-anchor the context first")
        token_embedding, position_embedding, blocks, final_norm = cache.weights(self.decode_weights)
        x = F.embedding(idx, token_embedding)
        if position_embedding is not None:
            x = x + position_embedding[start:start + T]
        x = x.view(B * T, -1)
        for layer, (block, weights) in enumerate(zip(self.blocks, blocks, strict=True)):
            x = block.decode(x, cache, layer, weights, None if head_masks is None else head_masks[layer])
        cache.advance(T)
        last = x.view(B, T, -1)[:, -1]
        return torch.mm(self.ln_f.decode(last, final_norm), token_embedding.t())

    def decode_weights(self) -> tuple:
        """What `decode` reads, as plain tensors (no copies but the fused projections)."""
        return (self.wte.weight, self.wpe.weight if self.wpe is not None else None,
                [block.decode_weights() for block in self.blocks], self.ln_f.decode_weights())

    def generate_stream(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                        top_k: int | None = None, top_p: float | None = None,
                        generator: torch.Generator | None = None, use_cache: bool = True,
                        ablate: Ablation | None = None) -> Iterator[torch.Tensor]:
        """Yields each new token, [B, 1], as soon as it is sampled, with the heads in `ablate` removed.

        temperature 0 is greedy. When the context outgrows block_size, the model
        keeps the most recent half block and goes on (re-encoding those tokens
        once), so with or without the cache it sees exactly the same context,
        and the cache saves work on all but one token in every half block.
        """
        tokens = self._sampled(idx, max_new_tokens, temperature, top_k, top_p, generator, use_cache, ablate)
        while True:
            with sampling_mode():  # around each token only: the caller's code between tokens runs as usual
                token = next(tokens, None)
            if token is None:
                return
            yield token

    def generate(self, idx: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        """idx [B, T] -> [B, T + max_new_tokens]; see `generate_stream` for options."""
        with sampling_mode():
            new = list(self._sampled(idx, max_new_tokens, **kwargs))
        return torch.cat([idx, *new], dim=1)

    def _sampled(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, generator: torch.Generator | None = None, use_cache: bool = True,
                 ablate: Ablation | None = None) -> Iterator[torch.Tensor]:
        if idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError("generate needs a non-empty prompt shaped [batch, tokens]")
        block = self.config.block_size
        keep = max(1, block // 2)
        context = idx[:, -block:]
        cache = self.new_cache(idx.shape[0]) if use_cache else None
        head_masks = self._head_masks(ablate, idx.device) if ablate else None
        pending = context  # tokens not yet in the cache
        for _ in range(max_new_tokens):
            if cache is None:
                logits = self(context, ablate=ablate)[0][:, -1]
            else:
                logits = self.decode(pending, cache, head_masks)
            next_token = sample_next(logits, temperature, top_k, top_p, generator)
            yield next_token
            context = torch.cat([context, next_token], dim=1)
            pending = next_token
            if context.shape[1] > block:
                context = context[:, -keep:]
                pending = context
                if cache is not None:
                    cache.reset()


@contextmanager
def sampling_mode() -> Iterator[None]:
    """How sampling runs: under inference mode (lighter than no_grad: no version counters, no
    view tracking), and with PyTorch's own CPU kernels rather than oneDNN's, whose set-up costs
    about 10 microseconds a call: more than a sampled token's GELU takes."""
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        with torch.inference_mode():
            yield
    finally:
        torch.backends.mkldnn.enabled = previous


# Below this temperature, sampling is greedy: logit gaps of float32's resolution, divided by it, leave
# every other token a probability of exactly 0 (and a still smaller one would overflow float32).
GREEDY_BELOW = 1e-20


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits [B, V] -> token ids [B, 1]. temperature 0 (or below GREEDY_BELOW) picks the argmax."""
    if temperature < GREEDY_BELOW:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token once the tokens before it already cover top_p; the first always stays.
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        drop_sorted[:, 0] = False  # also when top_p is too small for float32 to tell from 0
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    # An "exponential race": with E_i ~ Exp(1), argmax p_i / E_i is token i with probability
    # p_i, exactly as torch.multinomial draws, for one random draw and an argmax.
    race = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / race).argmax(dim=-1, keepdim=True)
