#!/usr/bin/env bash
# The two plan requests of held-out set 67 (thirty-eighth session, two
# H200s; committed before the runs), each answer kept as plan-rN.json:
#   bash bench/results/2026-11-28-plans-67/plans.sh bin/memplan
set -eu
m=${1:-memplan}
d=$(dirname "$0")
p=("$m" plan --device h200-141gb --gpus 2 --top 6 --format json)
"${p[@]}" specs/tinyllama-1.1b.yaml --global-batch 4 --seq 32768 >"$d/plan-r1.json"
"${p[@]}" --hf model/testdata/hf/olmo2-1b.json --global-batch 8 --seq 16384 >"$d/plan-r2.json"
