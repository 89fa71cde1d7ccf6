#!/usr/bin/env bash
# Forty-fourth session, one H200: the fake-process-group replicas of real runs
# (bench/torch/dist/fake-check.txt, tuning) and held-out set 81
# (bench/torch/dist/heldout-81.txt, predictions committed first in
# bench/results/2026-11-29-heldout81-fake-tp-predictions.txt), one rank at a
# time on GPU 0; lines not started within BUDGET seconds (default 540) are
# recorded as not run. Results in $OUT: fake-check.jsonl, heldout-81.jsonl,
# env.txt, err.txt.
#   bash bench/results/2026-11-29-h200-fake-tp-81/run.sh [check|heldout|both]
set -u
out=${OUT:-/tmp/out81}
mkdir -p "$out"
g=bench/torch/dist
. $g/machine-env.sh "$out/env.txt"
export DEADLINE=$(( $(date +%s) + ${BUDGET:-540} )) TIMEOUT=${TIMEOUT:-150}
what=${1:-both}
[[ $what != heldout ]] && bash $g/tp-run.sh $g/fake-check.txt "$out/fake-check.jsonl"
[[ $what != check ]] && bash $g/tp-run.sh $g/heldout-81.txt "$out/heldout-81.jsonl"
cat "$out"/*.err 2>/dev/null | tail -c 30000 >"$out/err.txt"
rm -f "$out"/*.err
