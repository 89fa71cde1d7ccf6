#!/usr/bin/env bash
# The four plan requests of held-out set 64 (thirty-eighth session, commit
# before the runs), each answer kept as plan-rN.json beside this script:
#   bash bench/results/2026-11-28-plans-64/plans.sh bin/memplan
set -eu
m=${1:-memplan}
d=$(dirname "$0")
p=("$m" plan --device h200-141gb --gpus 4 --top 10 --format json)
"${p[@]}" specs/tinyllama-1.1b.yaml --global-batch 16 --seq 8192 >"$d/plan-r1.json"
"${p[@]}" specs/llama-3.2-1b.yaml --global-batch 32 --seq 8192 >"$d/plan-r2.json"
"${p[@]}" specs/llama-3-8b.yaml --global-batch 8 --seq 8192 --loss-outside-autocast >"$d/plan-r3.json"
"${p[@]}" specs/mistral-7b.yaml --global-batch 4 --seq 16384 --precision amp-bf16 >"$d/plan-r4.json"
