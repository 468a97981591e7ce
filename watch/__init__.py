"""Watching attention. Each module has one job:

- `capture`: run the model's readable path and collect attention patterns
  `[head, query_pos, key_pos]` per layer (or, for a batch of probes, each pronoun's
  row and the next-token logits after it, in one forward);
- `heads`: head names ("L1H3") and ablation sets;
- `metrics`: score every head on pronoun probes (referent weight, top-1, baselines,
  continuation accuracy, ablation);
- `report`: the same as text (the head table, for a terminal or as Markdown);
- `heatmaps`: labelled heatmaps; `tensorboard`: all of it in TensorBoard, with the
  Custom Scalars charts that put every head on one axis;
- `page`: an offline HTML page to click through where each head looks;
- `callback`: the training callback that logs it while a model trains;
- `agreement`: pronoun agreement in single-person contexts, the heads that read the name
  before the pronoun, and what removing them costs (with its training callback);
- `inspect_cli`: `sample.py --attention` (heatmaps, or the page with `--html`) and `--probes`.

Nothing is imported here, so importing one module (say `watch.heads` for plain sampling)
does not pull in matplotlib.
"""
