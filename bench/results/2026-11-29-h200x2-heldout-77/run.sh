#!/usr/bin/env bash
# Held-out set 77 on two H200s, in one device call (about 10 × 1-2 minutes):
#   bash bench/results/2026-11-29-h200x2-heldout-77/run.sh
# with the harness's rotary tables in fp32, as memplan's program has them
# (MEMPLAN_ROPE_FP32, as set 75 ran). Results go to $OUT (heldout-77.jsonl,
# err.txt, env.txt); compare blind with
#   python3 bench/torch/dist/blind.py bench/results/2026-11-29-heldout77-dist-predictions.txt \
#     bench/results/2026-11-29-h200x2-heldout-77/heldout-77.jsonl
set -u
out=${OUT:-/tmp/out77}
mkdir -p "$out"
g=bench/torch/dist
. $g/machine-env.sh "$out/env.txt"
MEMPLAN_ROPE_FP32=1 TIMEOUT=150 bash $g/tp-run.sh $g/heldout-77.txt "$out/heldout-77.jsonl"
tail -c 20000 "$out/heldout-77.jsonl.err" >"$out/err.txt"
rm -f "$out/heldout-77.jsonl.err"
