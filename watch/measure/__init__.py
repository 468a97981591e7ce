"""The pass: what the watch measures. Probe sets (`probesets`) go through the model's readable path once each
(`capture`), every score (`scores`) is read from those captures into a pass's `Results` (`pipeline`), and what they
say is read once (`reading`): head types, the pronoun table, composition, and the proofs by ablation (`proofs`).
"""
