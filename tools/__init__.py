"""Offline tools and studies: run by hand, never imported by `model`, `data`, `trainer` or `watch`."""
