"""A generated corpus in which only an induction head helps: random strings written twice.

Each line is a string of 4 to 32 characters drawn uniformly from 62 letters and digits, written
twice with no separator ("k3Tq9k3Tq9"). Nothing predicts a character of the first copy; every
character of the second copy is the one that followed the same character in the first. The
copy's distance changes from line to line, so no fixed offset finds it: a model has to look
for the earlier occurrence of the current character and read what came after it, which is what
an induction head (helped by a previous-token head before it) does. Every line fits in a
64-character window, so a training window often holds a whole line.
"""

from __future__ import annotations

import random

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
SHORTEST, LONGEST = 4, 32


def training_text(seed: int, n_lines: int) -> str:
    """`n_lines` lines, each a random string written twice; the same seed gives the same text."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(SHORTEST, LONGEST)))
        lines.append(s + s)
    return "\n".join(lines) + "\n"
