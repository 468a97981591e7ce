"""A generated corpus in which only an induction head helps: random strings written twice.

Each line is a string of 1 to 32 characters drawn uniformly from 62 letters and digits, written
twice with no separator ("k3Tq9k3Tq9"). Nothing predicts a character of the first copy; every
character of the second copy is the one that followed the same character in the first. The
copy's distance changes from line to line, so no fixed offset finds it: a model has to look
for the earlier occurrence of the current character and read what came after it, which is what
an induction head (helped by a previous-token head before it) does. Every line fits in a
64-character window, so a training window often holds a whole line.

The lengths are spread evenly on a log scale (a length is e^u rounded, u uniform between ln 1 and
ln 32), so about one line in eight is a single character written twice ("kk") and half are at
most 6 characters long. The short lines are what make the circuit form early and in its textbook
shape: measured with a 2-layer attention-only model, 5 seeds of 5 formed a previous-token head in
layer 0 and an induction head in layer 1 by step 1,600; with the shortest lines 2 characters long
instead of 1, none had by step 3,000; with lengths uniform from 4 to 32, the loss fell later and
through other circuits (fixed offsets of 2 to 6 positions) whose heads the induction score does not
see (bench/LOG.md).
"""

from __future__ import annotations

import math
import random

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
SHORTEST, LONGEST = 1, 32


def training_text(seed: int, n_lines: int) -> str:
    """`n_lines` lines, each a random string written twice; the same seed gives the same text."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        length = round(math.exp(rng.uniform(math.log(SHORTEST), math.log(LONGEST))))  # even on a log scale
        s = "".join(rng.choice(ALPHABET) for _ in range(length))
        lines.append(s + s)
    return "\n".join(lines) + "\n"
