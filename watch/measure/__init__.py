"""The pass: what the watch measures. Probe sets (`probesets`) go through the model's readable path once each
(`capture`), every score (`scores`) is read from those captures into a pass's `Results`, and what they say is read
once (`reading`): head types (`headtypes`), the pronoun table (`pronouns`), composition (`composition`), and the
proofs by ablation (`proofs`). A kind of probe set is one `ProbeKind` record (reading.py) and a head type one
`HeadType` record (headtypes.py): adding one is adding its record.
"""
