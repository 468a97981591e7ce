#!/usr/bin/env bash
# The GPU check: GPT-2 small (configs/gpt2_small.toml: 12 layers x 12 heads x 768,
# block 1024, bf16 autocast, torch.compile) on one CUDA device, with its MFU against
# the bf16 matmul peak measured on the same device. Random tokens of GPT-2's padded
# vocabulary, so the machine needs no corpus; grad_accum=1 keeps each timed step short
# (tokens/s and MFU do not depend on it). The JSON, log and tables land in $OUT
# (or bench/out/gpu). Expect a few minutes, most of it compiling.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/out/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$out/gpu.txt" || true
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" \
  | tee -a "$out/gpu.txt"
python bench/run.py --only throughput --config configs/gpt2_small.toml --synthetic --set grad_accum=1 \
  --steps 50 --warmup 10 --json "$out/gpu.json" 2>&1 | tee "$out/gpu.log"
cp bench/RESULTS.md "$out/RESULTS.md"
