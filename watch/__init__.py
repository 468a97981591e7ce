"""Watching attention. One pass (`pipeline`) captures each probe set once and reads every score;
what the scores say is read once from its results (`reading`), and everything else reads that.
Each module has one job:

- `probesets`: what the model is run on (pronoun probes, agreement contexts, repeated random
  tokens, held-out text, watched sentences), each checked against the block once;
- `capture`: one forward of a probe set through the readable path: patterns
  `[batch, head, query_pos, key_pos]` per layer and the logits the set reads;
- `scores`: every score, a registered function of a capture; `pipeline`: the pass and its results;
- `headtypes`: what kind of head each head became, against the untrained model;
- `pronouns`: the pronoun head table and agreement;
- `reading`: a pass read once (its pronoun table, agreement, head types and composition, and the
  baselines it is read against: the untrained model, a fine-tune's model before fine-tuning), for every reader;
- `ablation`: what removing heads costs (zero- and mean-ablation), proof by ablation;
- `composition`: how heads compose (Q-, K- and V-composition), from the weights alone;
- `heads`: head names ("L1H3"), the heads to remove by name, and token labels for every view;
- `report`: the tables and lines, for a terminal or as Markdown;
- `heatmaps`: labelled heatmaps, and what an evaluation draws; `tensorboard`: all of it in TensorBoard, with the Custom
  Scalars charts that put every head on one axis;
- `page`: an offline HTML page to click through where each head looks;
- `callback`: the training callback that watches a model as it trains;
- `inspect_cli`: `sample.py --attention` (heatmaps, or the page with `--html`), `--probes`, `--heads`.

Nothing is imported here, so importing one module (say `watch.heads` for plain sampling) pulls
in no other module of the package.
"""
