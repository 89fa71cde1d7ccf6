#!/usr/bin/env bash
# Held-out set 80 on two H200s (bench/torch/dist/heldout-80.txt: FSDP2 under NCCL, the cache kept after wrapping),
# in one device call (nvidia-h200-x2), lines started until 420 s have passed; results in $OUT (heldout-80.jsonl,
# train-log.txt, env.txt). Compare with the predictions committed before the run:
#   python3 bench/torch/dist/blind.py bench/results/2026-11-29-heldout80-dist-predictions.txt \
#       bench/results/2026-11-29-h200x2-heldout-80/heldout-80.jsonl
set -u
out=${OUT:-/tmp/out80}
mkdir -p "$out"
g=bench/torch/dist
. $g/machine-env.sh "$out/env.txt"
NGPU=2 bash $g/run.sh $g/heldout-80.txt "$out/train" 420
cp "$out/train/dist.jsonl" "$out/heldout-80.jsonl"
cp "$out/train/log.txt" "$out/train-log.txt"
rm -rf "$out/train"
