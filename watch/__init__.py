"""Watching attention. One pass (`pipeline`) captures each probe set (`probesets`) once (`capture`) and reads every
score (`scores`); what the scores say is read once from its results (`reading`), and everything else (the terminal
`report`, `tensorboard`, `heatmaps`, the attention `page`, the training `callback`, `sample.py`'s `inspect_cli`)
reads that. Each module's docstring says its one job.

Nothing is imported here, so importing one module (say `watch.heads` for plain sampling) pulls
in no other module of the package.
"""
