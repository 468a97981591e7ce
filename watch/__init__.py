"""Watching attention, in two halves: `measure/` (the pass: probe sets -> one capture each -> scores -> one
reading) and `show/` (the views of that reading: report, TensorBoard, heatmaps, page). `callback.py` runs them during
training, `inspect.py` for `sample.py`. Nothing is imported here, so importing one module pulls in no other.
"""
