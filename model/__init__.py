"""The model: causal self-attention, the GPT built around it, and sampling from it."""

from model.attention import SelfAttention
from model.config import GPTConfig
from model.gpt import GPT
from model.sampling import KVCache, sample_next

__all__ = ["GPT", "GPTConfig", "KVCache", "SelfAttention", "sample_next"]
