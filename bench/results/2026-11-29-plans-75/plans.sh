#!/usr/bin/env bash
# The three plan requests of held-out set 75 (fortieth session, two H200s),
# answered before any run, each answer kept as plan-rN.json beside this
# script:
#   bash bench/results/2026-11-29-plans-75/plans.sh bin/memplan
set -eu
m=${1:-memplan}
d=$(dirname "$0")
p=("$m" plan --device h200-141gb --gpus 2 --top 6 --format json)
"${p[@]}" --hf model/testdata/hf/granite-3.1-2b.json --global-batch 16 --seq 4096 --precision amp-bf16 --loss-outside-autocast >"$d/plan-r1.json"
"${p[@]}" --hf model/testdata/hf/smollm3-3b.json --global-batch 8 --seq 8192 --precision amp-bf16 --loss-outside-autocast >"$d/plan-r2.json"
"${p[@]}" specs/llama-3.2-1b.yaml --global-batch 32 --seq 4096 --precision amp-bf16 --optimizer adamw --loss-outside-autocast >"$d/plan-r3.json"
