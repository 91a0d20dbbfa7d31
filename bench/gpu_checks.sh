#!/bin/bash
# The GPU checks of docs/benchmarks.md "On a GPU", as one script for a lent GPU machine:
#
#   bash bench/gpu_checks.sh [DATA_DIR] [WHEELS_DIR]
#
# DATA_DIR holds MNIST (torchvision layout; default .gpu/data); WHEELS_DIR (default .whl), if
# present, holds Gradio and what it needs where the machine lacks them (installed to /tmp/site).
# Each step has its own time limit and the next runs whatever the last did; everything printed
# goes to $OUT/gpu_checks.log (OUT defaults to /tmp/gpu-checks). Order: the time to accuracy
# first, alone on the GPU, since its timing matters most; then the app on CUDA and on the CPU,
# NCCL with two processes on one GPU, and the GPU-marked tests. On an H100 it needs ~10 minutes
# (2026-11-26: 120 s of it preparing MNIST's cached parts, cold). docs/benchmarks.md has its output.
set -u
DATA=${1:-.gpu/data}
WHEELS=${2:-.whl}
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_checks.log") 2>&1
export PYTHONUNBUFFERED=1 VIT_MCP=0 GRADIO_ANALYTICS_ENABLED=False
step() { echo; echo "=== $1 ($(date -u +%H:%M:%S), ${SECONDS} s in)"; }
# Each step's limit: its own cap, or what is left before $DEADLINE seconds (default 590), if less.
DEADLINE=${DEADLINE:-590}
limit() { local left=$(( DEADLINE - SECONDS )); echo $(( left < $1 ? (left > 1 ? left : 1) : $1 )); }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cpus', __import__('os').cpu_count())"
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl && export PYTHONPATH=/tmp/site
fi

step "MNIST time to accuracy (bench/time_to_accuracy.py)"
timeout $(limit 380) python3 -m bench.time_to_accuracy --data-dir "$DATA" --out /tmp/tta
for f in metrics.csv config.json; do cp /tmp/tta/run/$f "$OUT/tta_$f" 2>/dev/null; done

step "/classify on CUDA and on the CPU (bench/app_latency.py --devices)"
timeout $(limit 80) python3 -m bench.app_latency --devices cuda,cpu --n 60

step "two NCCL processes on one GPU (bench/nccl_one_gpu.py)"
timeout $(limit 30) python3 -m bench.nccl_one_gpu

step "the GPU-marked tests"
timeout $(limit 600) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step "end"
