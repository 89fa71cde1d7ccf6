#!/usr/bin/env bash
# The eight tune requests of held-out set 76 (fortieth session), answered
# before any run; prints the batch each chose and its fill:
#   bash bench/results/2026-11-29-tuned-76/tune.sh bin/memplan
set -eu
bash "$(dirname "$0")/../../torch/tune-answers.sh" "${1:-memplan}" <<'REQ'
--hf model/testdata/hf/olmo2-1b.json --seq 4096
--hf model/testdata/hf/gemma-2-2b.json --seq 4096 --checkpointing every-block
--hf model/testdata/hf/qwen2.5-0.5b.json --seq 4096
--hf model/testdata/hf/phi-3-mini-4k.json --seq 4096 --checkpointing every-block
specs/tinyllama-1.1b.yaml --seq 4096
specs/gpt2-xl.yaml
specs/resnet-50.yaml --precision bf16
specs/whisper-base-encoder.yaml
REQ
