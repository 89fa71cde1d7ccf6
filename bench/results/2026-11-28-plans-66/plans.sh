#!/usr/bin/env bash
# The two plan requests of held-out set 66 (thirty-eighth session, after
# c2006b4's change to DDP's rebuild; committed before the runs), each answer
# kept as plan-rN.json beside this script:
#   bash bench/results/2026-11-28-plans-66/plans.sh bin/memplan
set -eu
m=${1:-memplan}
d=$(dirname "$0")
p=("$m" plan --device h200-141gb --gpus 4 --top 10 --format json)
"${p[@]}" specs/llama-3-8b.yaml --global-batch 32 --seq 4096 >"$d/plan-r1.json"
"${p[@]}" specs/mistral-7b.yaml --global-batch 16 --seq 4096 --precision amp-bf16 >"$d/plan-r2.json"
