"""Benchmarks, side by side with nanoGPT: `python bench/run.py` (see bench/README.md).

- `harness`: child processes, their wall time and peak memory, interleaved repeats;
- `workers`: the measurements that run inside a child process (matmul peak, training step,
  sampling, ours and nanoGPT's);
- `nanogpt`: the reference, copied from ../shared/anchors/nanogpt and run as its README says;
- `report`: medians with their spread, ratios, results.json and RESULTS.md;
- `run`: the command line.
"""
