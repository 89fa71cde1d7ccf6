#!/usr/bin/env bash
# Forty-fourth session, one H200: fake-process-group train.py runs (run.sh's
# "W=N F=0" lines, rank 0 alone on GPU 0): the replicas of real runs
# (bench/torch/dist/fake-check-train.txt, tuning) and held-out set 83
# (bench/torch/dist/heldout-83.txt, predictions committed first in
# bench/results/2026-11-29-heldout83-fake-fsdp-predictions.txt), within BUDGET
# seconds (default 540). Results in $OUT: fake-check-train.jsonl,
# heldout-83.jsonl, train-log.txt, env-3.txt.
#   bash bench/results/2026-11-29-h200-fake-tp-81/run-train.sh
set -u
out=${OUT:-/tmp/out83}
mkdir -p "$out"
g=bench/torch/dist
. $g/machine-env.sh "$out/env-3.txt"
start=$(date +%s)
NGPU=1 bash $g/run.sh $g/fake-check-train.txt "$out/check" "${BUDGET:-540}"
left=$(( ${BUDGET:-540} - ($(date +%s) - start) ))
NGPU=1 bash $g/run.sh $g/heldout-83.txt "$out/held" "$left"
cp "$out/check/dist.jsonl" "$out/fake-check-train.jsonl"
cp "$out/held/dist.jsonl" "$out/heldout-83.jsonl"
cat "$out/check/log.txt" "$out/held/log.txt" | tail -c 30000 >"$out/train-log.txt"
rm -rf "$out/check" "$out/held"
