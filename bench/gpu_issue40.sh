#!/bin/bash
# Issue 40's MNIST screen, as one script for a lent GPU machine (one call of <= 9 minutes that
# resumes across loans):
#
#   VIT_COMMIT=<this commit> bash bench/gpu_issue40.sh [DATA_DIR] [STATE_DIR]
#
# Runs the recipes below side by side on the one GPU (each a 514 k-parameter model that leaves
# most of an H100 idle alone), each for MNIST's 20 epochs, each `--resume`d from STATE_DIR/NAME*.tar
# when an earlier loan left them there. Everything a run has (checkpoint, metrics, its
# train_state/ for --resume) comes back as $OUT/NAME.tar and $OUT/NAME-state.tar (~7 and ~10 MB:
# a call returns at most 8 files of <= 16 MiB), the log as $OUT/gpu_issue40.log. Then, here on the CPU: choose on validation
# (metrics.csv's val_acc), report test, and read the held-out families (python -m bench.heldout
# --checkpoints FOLDER --models NAME); docs/reliability.md says why those and not the test set.
#
# Prepare here, once (ignored by git; 11 MB of MNIST travels gzipped):
#   echo /.gpu/ >> .git/info/exclude; mkdir -p .gpu/data/MNIST/raw .gpu/i40
#   for f in ../shared/data/MNIST/raw/*-ubyte; do gzip -c $f > .gpu/data/MNIST/raw/$(basename $f).gz; done
# Call: run(command="VIT_COMMIT=$(git rev-parse HEAD) bash bench/gpu_issue40.sh", carry=[".gpu"],
#           timeout_s=570), with the working tree clean (the commit names the code that ran);
# afterwards copy the $OUT/*.tar back into .gpu/i40/ for the next loan.
set -u
DATA=${1:-.gpu/data}
STATE=${2:-.gpu/i40}
OUT=${OUT:-/tmp/gpu-issue40}
DEADLINE=${DEADLINE:-540}                  # seconds for the whole call, packing included
EPOCHS=${EPOCHS:-20}
EXTRA=${EXTRA:-}                           # more flags for every run (a smoke test: --subset 2000)
mkdir -p "$OUT" /tmp/i40
exec > >(tee -a "$OUT/gpu_issue40.log") 2>&1
export PYTHONUNBUFFERED=1
echo "=== $(date -u +%FT%TZ) commit ${VIT_COMMIT:-unnamed}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"

# name: the flags beside MNIST's defaults. "base" is the bundled recipe again, on this card.
declare -A RECIPES=(
  [base]=""
  [degrade]="--degrade 0.3"
  [degrade-erase]="--degrade 0.3 --erase 0.1"
)
pids=()
for name in "${!RECIPES[@]}"; do
  run=/tmp/i40/$name
  for part in "$name" "$name-state"; do
    [ -f "$STATE/$part.tar" ] && mkdir -p "$run" && tar -xf "$STATE/$part.tar" -C "$run"
  done
  resume=--no-resume
  [ -f "$run/train_state/state.safetensors" ] && resume=--resume
  # shellcheck disable=SC2086
  timeout $(( DEADLINE - SECONDS - 30 )) python3 -m vit.train --dataset mnist --data-dir "$DATA" \
    --no-download --epochs "$EPOCHS" --out "$run" $resume --seed 0 ${RECIPES[$name]} $EXTRA \
    > "$OUT/$name.log" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"          # (a bare `wait` would also wait for the log's tee)
for name in "${!RECIPES[@]}"; do
  echo "--- $name: $(tail -n 2 "$OUT/$name.log" | tr '\n' ' ')"
  # Two files a run, each under the 16 MiB a returned file may have: what --resume needs, and
  # the checkpoint with its records, snapshots and best/.
  tar -cf "$OUT/$name-state.tar" -C "/tmp/i40/$name" train_state 2>/dev/null
  tar -cf "$OUT/$name.tar" -C "/tmp/i40/$name" --exclude=./train_state . 2>/dev/null
done
echo "=== done in ${SECONDS} s"
