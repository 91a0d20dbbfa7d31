#!/bin/bash
# Issue 47's fine-tunes (photos and other hands), as one script for a lent GPU: the same commands
# docs/training.md gives for this 2-core CPU (each fits its 45 minutes there), only faster.
#
#   VIT_COMMIT=$(git rev-parse HEAD) PART=mnist|fashion|fashion2|fashion3|soup|prep bash bench/gpu_issue47.sh
#   (the commit in full, written into the command here: a bundled checkpoint needs all 40
#   characters, and the copy of .git a GPU machine gets may hold an older HEAD)
#
# PART=mnist: two recipes from the bundled checkpoints/mnist, two seeds each — "photo": 1 epoch
# over 20,000 digits with drawn and photographed non-digits; "photo-degrade": 1 epoch over all
# 55,000 with a fifth of them degraded as scans are (shrunk, few grey levels, blur).
# PART=fashion: the clothing model with digits (drawn and MNIST's) and photos as "not a piece of
# clothing", two seeds. Runs of a recipe start together; the first seed's run of each recipe
# draws the non-digits once and the cache gives them to the second.
#
# Each run comes back as $OUT/NAME-sSEED.tar (checkpoint, records, snapshots, best/; a few MB), the
# log as $OUT/gpu_issue47-PART.log. Choose here on validation and the held-out tune halves
# (python -m bench.heldout --split tune), then read the report halves of the chosen one.
#
# What the commands read travels in gpu_pack/ (ignored by git; a call carries at most 64 MiB,
# the repository ~31 of them) and is laid out in $DATA (default /tmp/gpu_data) as ../shared/data
# is here, once per machine:
#   gpu_pack/MNIST/raw/*.gz              (gzip -c each of ../shared/data/MNIST/raw/*)
#   gpu_pack/photos.webp, photos.json    (python -m bench.photo_pack pack ../shared/data gpu_pack/photos.webp:
#                                         the trainer's 10,000 CIFAR-10 photos, the same pixels)
#   gpu_pack/FashionMNIST/raw/*.gz       (from /usr/share/datasets/fashion-mnist)
# A call carries gpu_pack/MNIST and the photos (PART=mnist), then the next, on the same warm
# machine, gpu_pack/FashionMNIST alone (PART=fashion): the rest is still in $DATA.
set -u
DATA=${DATA:-/tmp/gpu_data}
PACK=${PACK:-gpu_pack}
PART=${PART:-mnist}
OUT=${OUT:-/tmp/gpu-issue47}
DEADLINE=${DEADLINE:-540}                  # seconds for the whole call, packing included
EXTRA=${EXTRA:-}                           # more flags for every run (a smoke test: --subset 500)
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT" /tmp/i47
exec > >(tee -a "$OUT/gpu_issue47-$PART.log") 2>&1
export PYTHONUNBUFFERED=1
echo "=== $(date -u +%FT%TZ) commit ${VIT_COMMIT:-unnamed} part $PART"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"
mkdir -p "$DATA"
for part in MNIST FashionMNIST; do
  [ -d "$PACK/$part" ] && [ ! -d "$DATA/$part" ] && cp -r "$PACK/$part" "$DATA/"
done
if [ -f "$PACK/photos.webp" ] && [ ! -d "$DATA/CIFAR-10-images" ]; then
  python3 -m bench.photo_pack unpack "$PACK/photos.webp" "$DATA" || exit 3
fi
for need in MNIST/raw CIFAR-10-images/train; do
  [ -d "$DATA/$need" ] || { echo "missing $DATA/$need: nothing run"; exit 3; }
done
FT="--no-download --data-dir $DATA --epochs 1 --warmup-epochs 0.1 --distill 0 --lr 0.0003 --device $DEVICE"
DIGIT_OUT="scribble,dots,dash,shape,letter,two digits,photo"
CLOTHING_OUT="scribble,shape,letter,digit,handwritten digit,photo"
declare -A RECIPES
if [ "$PART" = mnist ]; then
  RECIPES=([photo]="--init checkpoints/mnist --subset 20000"
           [photo-degrade]="--init checkpoints/mnist --subset 0 --degrade 0.2")
  OUTLIERS=$DIGIT_OUT; DATASET=mnist
elif [ "$PART" = soup ]; then
  # Two more seeds of the bundled recipe (seed 1), whose weights can be averaged with it.
  RECIPES=([photo-degrade]="--init $PACK/mnist-base --subset 0 --degrade 0.2")
  OUTLIERS=$DIGIT_OUT; DATASET=mnist; SEEDS=${SEEDS:-0 2}
elif [ "$PART" = prep ]; then
  echo "data laid out in $DATA"; exit 0
else
  [ -d "$DATA/FashionMNIST/raw" ] || { echo "missing $DATA/FashionMNIST/raw: nothing run"; exit 3; }
  RECIPES=([fashion-photo]="--init checkpoints/fashion-mnist --subset 20000")
  # PART=fashion2: the outside pictures weigh more (--oe-weight 1.0), on 20,000 or all 55,000
  # PART=fashion3: garments also shown as flat silhouettes, as the page's Fill tool makes them
  # (--filled), for one epoch or two; every seed at once.
  [ "$PART" = fashion3 ] && RECIPES=(
    [fashion-fill]="--init checkpoints/fashion-mnist --subset 0 --oe-weight 1.0 --filled 0.25"
    [fashion-fill2]="--init checkpoints/fashion-mnist --subset 0 --oe-weight 1.0 --filled 0.25 --epochs 2")
  [ "$PART" = fashion2 ] && RECIPES=(
    [fashion-oe1]="--init checkpoints/fashion-mnist --subset 20000 --oe-weight 1.0"
    [fashion-oe1-all]="--init checkpoints/fashion-mnist --subset 0 --oe-weight 1.0"
    [fashion-photo]="--init checkpoints/fashion-mnist --subset 20000")
  OUTLIERS=$CLOTHING_OUT; DATASET=fashion-mnist
fi
SEEDS=${SEEDS:-0 1}
TOGETHER=${TOGETHER:-0}                    # 1: every seed's runs at once (a GPU with cores to spare)
[ "$TOGETHER" = 1 ] && WAVES=("$SEEDS") || WAVES=($SEEDS)
for wave in "${WAVES[@]}"; do
  pids=()
  for seed in $wave; do for name in "${!RECIPES[@]}"; do
    # shellcheck disable=SC2086
    timeout $(( DEADLINE - SECONDS - 20 )) python3 -m vit.train --dataset $DATASET $FT \
      --outliers "$OUTLIERS" --seed $seed --out "/tmp/i47/$name-s$seed" ${RECIPES[$name]} $EXTRA \
      > "$OUT/$name-s$seed.log" 2>&1 &
    pids+=($!)
  done; done
  wait "${pids[@]}"
  for seed in $wave; do for name in "${!RECIPES[@]}"; do
    echo "--- $name-s$seed: $(tail -n 2 "$OUT/$name-s$seed.log" | tr '\n' ' ')"
    # The clothing model's "not one of these" distance, as the bundled one was fitted.
    [ "$DATASET" = fashion-mnist ] && timeout $(( DEADLINE - SECONDS - 10 )) python3 -m vit.fit_typical \
      "/tmp/i47/$name-s$seed" --data-dir "$DATA" --share 0.002 2>&1 | tail -n 1
    tar -cf "$OUT/$name-s$seed.tar" -C "/tmp/i47/$name-s$seed" --exclude=./train_state . 2>/dev/null
    rm -f "$OUT/$name-s$seed.log"
  done; done
done
echo "=== done in ${SECONDS} s"
