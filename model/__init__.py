"""The model: causal self-attention and the GPT built around it."""

from model.attention import KVCache, SelfAttention
from model.gpt import GPT, GPTConfig, sample_next

__all__ = ["GPT", "GPTConfig", "KVCache", "SelfAttention", "sample_next"]
