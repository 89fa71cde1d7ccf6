#!/usr/bin/env bash
# The two tune requests of held-out set 73 (thirty-ninth session), answered
# before any run: batch 1 does not fit, and the fixes tune suggests:
#   bash bench/results/2026-11-28-tuned-73/tune.sh bin/memplan
m=${1:-memplan}
"$m" tune specs/llama-3-8b.yaml --device h200-141gb
"$m" tune --hf model/testdata/hf/olmo2-7b.json --seq 4096 --device h200-141gb
true
