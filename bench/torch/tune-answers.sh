#!/usr/bin/env bash
# tune-answers.sh [MEMPLAN]: memplan tune's answer on an H200 for each
# request read from standard input (one per line: the spec and its flags),
# printed as "BATCH FILL% REQUEST", the record a tune held-out set is made
# from (bench/results/*-tuned-*/tune.sh).
#   bash bench/torch/tune-answers.sh bin/memplan <<'REQ'
#   --hf model/testdata/hf/qwen3-0.6b.json --seq 4096
#   REQ
set -eu
m=${1:-memplan}
while read -r a; do
  # shellcheck disable=SC2086
  "$m" tune $a --device h200-141gb --format json | jq -r --arg a "$a" '"\(.batch) \(.fill * 1000 | round / 10)% \($a)"'
done
