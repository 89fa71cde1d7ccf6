#!/usr/bin/env bash
# Held-out set 69 on four H200s, one device call:
#   bash bench/results/2026-11-28-h200x4-heldout-69/run.sh
# Results go to $OUT (heldout-69.jsonl, err.txt, env.txt).
set -u
out=${OUT:-/tmp/out69}
mkdir -p "$out"
. bench/torch/dist/machine-env.sh "$out/env.txt"
TIMEOUT=200 bash bench/torch/dist/tp-run.sh bench/torch/dist/heldout-69.txt "$out/heldout-69.jsonl"
tail -c 30000 "$out/heldout-69.jsonl.err" >"$out/err.txt"; rm -f "$out/heldout-69.jsonl.err"
