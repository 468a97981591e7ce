"""Data: tokenizers, corpus preparation into token files, and batches."""
