#!/usr/bin/env bash
# The four `tune --alloc-conf auto` requests of held-out set 72 (thirty-ninth
# session), answered before any run; prints each answer's lines (every
# setting tried, with its largest batch):
#   bash bench/results/2026-11-28-tuned-72/tune.sh bin/memplan
set -eu
m=${1:-memplan}
while read -r a; do
  echo "== $a"
  # shellcheck disable=SC2086
  "$m" tune $a --device h200-141gb --alloc-conf auto | sed -n '/allocator settings tried/,$p'
done <<'REQ'
--hf model/testdata/hf/gemma-3-1b.json --seq 4096
specs/bert-base.yaml --seq 512
specs/resnet-101.yaml
specs/llama-3.2-1b.yaml
REQ
