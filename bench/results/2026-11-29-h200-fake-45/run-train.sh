#!/usr/bin/env bash
# Forty-fifth session, one H200: a run.sh grid's fake-process-group train.py lines ("W=N F=0": rank 0 alone on GPU
# 0) within BUDGET seconds (default 540); records in $OUT/NAME.jsonl, the log's tail in $OUT/train-log-NAME.txt,
# the machine in $OUT/env-NAME.txt.
#   bash bench/results/2026-11-29-h200-fake-45/run-train.sh bench/torch/dist/heldout-88.txt heldout-88
set -u
grid=$1 name=$2
out=${OUT:-/tmp/out-train45}
mkdir -p "$out"
g=bench/torch/dist
. $g/machine-env.sh "$out/env-$name.txt"
NGPU=1 bash $g/run.sh "$grid" "$out/r" "${BUDGET:-540}"
cp "$out/r/dist.jsonl" "$out/$name.jsonl"
tail -c 30000 "$out/r/log.txt" >"$out/train-log-$name.txt"
rm -rf "$out/r"
