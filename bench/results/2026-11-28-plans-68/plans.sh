#!/usr/bin/env bash
# The four plan requests of held-out set 68 (thirty-ninth session, answered
# before any run), each answer kept as plan-rN.json beside this script:
#   bash bench/results/2026-11-28-plans-68/plans.sh bin/memplan
set -eu
m=${1:-memplan}
d=$(dirname "$0")
p=("$m" plan --device h200-141gb --gpus 4 --top 10 --format json)
"${p[@]}" specs/qwen2.5-7b.yaml --global-batch 8 --seq 8192 --precision amp-bf16 --optimizer adamw --loss-outside-autocast >"$d/plan-r1.json"
"${p[@]}" --hf model/testdata/hf/gemma-2-2b.json --global-batch 32 --seq 4096 --precision amp-bf16 >"$d/plan-r2.json"
"${p[@]}" --hf model/testdata/hf/phi-3-mini-4k.json --global-batch 16 --seq 4096 --precision amp-bf16 --loss-outside-autocast >"$d/plan-r3.json"
"${p[@]}" --hf model/testdata/hf/olmo2-7b.json --global-batch 8 --seq 4096 --precision amp-bf16 --loss-outside-autocast >"$d/plan-r4.json"
