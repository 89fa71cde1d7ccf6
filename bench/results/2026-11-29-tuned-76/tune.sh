#!/usr/bin/env bash
# The eight tune requests of held-out set 76 (fortieth session), answered
# before any run; prints the batch each chose and its fill:
#   bash bench/results/2026-11-29-tuned-76/tune.sh bin/memplan
set -eu
m=${1:-memplan}
while read -r a; do
  # shellcheck disable=SC2086
  "$m" tune $a --device h200-141gb --format json | jq -r --arg a "$a" '"\(.batch) \(.fill * 1000 | round / 10)% \($a)"'
done <<'REQ'
--hf model/testdata/hf/olmo2-1b.json --seq 4096
--hf model/testdata/hf/gemma-2-2b.json --seq 4096 --checkpointing every-block
--hf model/testdata/hf/qwen2.5-0.5b.json --seq 4096
--hf model/testdata/hf/phi-3-mini-4k.json --seq 4096 --checkpointing every-block
specs/tinyllama-1.1b.yaml --seq 4096
specs/gpt2-xl.yaml
specs/resnet-50.yaml --precision bf16
specs/whisper-base-encoder.yaml
REQ
