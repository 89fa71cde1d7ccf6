#!/usr/bin/env bash
# The nine tune requests of held-out set 70 (thirty-ninth session), answered
# before any run; prints the batch each chose and its fill:
#   bash bench/results/2026-11-28-tuned-70/tune.sh bin/memplan
set -eu
bash "$(dirname "$0")/../../torch/tune-answers.sh" "${1:-memplan}" <<'REQ'
--hf model/testdata/hf/qwen3-0.6b.json --seq 4096
--hf model/testdata/hf/smollm3-3b.json --seq 4096 --checkpointing every-block
--hf model/testdata/hf/granite-3.1-2b.json --seq 2048
--hf model/testdata/hf/phi-2.json --seq 2048
--hf model/testdata/hf/starcoder2-3b.json --seq 4096 --checkpointing every-block
--hf model/testdata/hf/gemma-3-1b.json --seq 4096
specs/vit-b-16.yaml
specs/bert-base.yaml --seq 512
specs/resnet-101.yaml
REQ
