#!/usr/bin/env bash
# Held-out set 74 on two GPUs, one device call:
#   bash bench/results/2026-11-28-h200x2-heldout-74/run.sh
# Results in $OUT (heldout-74.jsonl, err.txt, env.txt).
set -u
out=${OUT:-/tmp/out74}
mkdir -p "$out"
. bench/torch/dist/machine-env.sh "$out/env.txt"
TIMEOUT=140 bash bench/torch/dist/tp-run.sh bench/torch/dist/heldout-74.txt "$out/heldout-74.jsonl"
tail -c 30000 "$out/heldout-74.jsonl.err" >"$out/err.txt"; rm -f "$out/heldout-74.jsonl.err"
