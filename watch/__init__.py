"""Watching attention, in two halves, so the measuring never depends on how it is shown:

- `measure/`, the pass: probe sets (`probesets`) go through the model's readable path once each (`capture`: the
  patterns `[batch, head, query_pos, key_pos]` per layer and the logits a set reads), every score (`scores`) is
  read from those captures, and what they say is read once (`reading`): the head types (`headtypes`), the pronoun
  table (`pronouns`), composition from the weights (`composition`) and the proofs by ablation (`proofs`). Head
  names such as "L1H3" are `heads`.
- `show/`, the views of one reading: the terminal and Markdown report (`report`), heatmaps (`heatmaps`),
  TensorBoard (`tensorboard`, with the Custom Scalars charts that put every head on one axis) and the offline page
  to click through where each head looks (`page`). None of them runs the model.

`callback.py` runs a pass at each evaluation of a training run; `inspect.py` runs one for `sample.py --attention`,
`--probes` and `--heads`. Nothing is imported here, so importing one module (say `watch.measure.heads` for plain
sampling) pulls in no other module of the package.
"""
