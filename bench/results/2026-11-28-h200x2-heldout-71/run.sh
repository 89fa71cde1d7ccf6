#!/usr/bin/env bash
# Held-out set 71 on two or more GPUs, then a listed gap with its history, one device call:
#   bash bench/results/2026-11-28-h200x2-heldout-71/run.sh
# Results in $OUT (heldout-71.jsonl, err.txt, env.txt). On four GPUs the
# lines run in two streams of two GPUs each (CUDA_VISIBLE_DEVICES 0,1 and 2,3).
set -u
out=${OUT:-/tmp/out71}
mkdir -p "$out"
. bench/torch/dist/machine-env.sh "$out/env.txt"
grep -v '^#' bench/torch/dist/heldout-71.txt | grep . >/tmp/g71
if (( $(nvidia-smi -L | wc -l) >= 4 )); then
  awk 'NR % 2 == 1' /tmp/g71 >/tmp/g71a; awk 'NR % 2 == 0' /tmp/g71 >/tmp/g71b
  CUDA_VISIBLE_DEVICES=0,1 MASTER_PORT=29511 TIMEOUT=150 bash bench/torch/dist/tp-run.sh /tmp/g71a "$out/a.jsonl" &
  sleep 5
  CUDA_VISIBLE_DEVICES=2,3 TIMEOUT=150 bash bench/torch/dist/tp-run.sh /tmp/g71b "$out/b.jsonl"
  wait
  cat "$out/a.jsonl" "$out/b.jsonl" >"$out/heldout-71.jsonl"; cat "$out/a.jsonl.err" "$out/b.jsonl.err" >"$out/heldout-71.jsonl.err"
  rm -f "$out"/a.jsonl* "$out"/b.jsonl*
else
  TIMEOUT=150 bash bench/torch/dist/tp-run.sh /tmp/g71 "$out/heldout-71.jsonl"
fi
tail -c 30000 "$out/heldout-71.jsonl.err" >"$out/err.txt"; rm -f "$out/heldout-71.jsonl.err"
# Then the Maverick gap with rank 0's whole history (trace-71-maverick.txt).
mkdir -p /tmp/ev71
MEMPLAN_SNAPSHOT_ENTRIES=600000 TIMEOUT=150 SNAPDIR=/tmp/snaps71 \
  bash bench/torch/dist/tp-run.sh bench/torch/dist/trace-71-maverick.txt "$out/trace-maverick.jsonl"
for f in /tmp/snaps71/*rank0.pickle; do
  python3 bench/torch/dist/snap2events.py "$f" "$out/maverick-$(basename "$f" .pickle).json.gz"
done
rm -f "$out/trace-maverick.jsonl.err"
