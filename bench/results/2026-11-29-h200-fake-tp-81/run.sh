#!/usr/bin/env bash
# Forty-fourth session, one H200: fake-process-group runs of tp-run.sh grids
# (F=R lines: one rank at a time on GPU 0), each GRID:NAME pair's records in
# $OUT/NAME.jsonl; lines not started within BUDGET seconds (default 540) of
# the start are recorded as not run; env.txt and err.txt beside them.
#   bash bench/results/2026-11-29-h200-fake-tp-81/run.sh \
#       bench/torch/dist/fake-check.txt:fake-check bench/torch/dist/heldout-81.txt:heldout-81   # first call
#   bash bench/results/2026-11-29-h200-fake-tp-81/run.sh \
#       bench/torch/dist/fake-check-cp.txt:fake-check-cp bench/torch/dist/heldout-82.txt:heldout-82   # second
# Held-out sets 81 and 82 were predicted before their runs
# (bench/results/2026-11-29-heldout81-fake-tp-predictions.txt, -heldout82-fake-cp-).
set -u
out=${OUT:-/tmp/out81}
mkdir -p "$out"
g=bench/torch/dist
. $g/machine-env.sh "$out/env.txt"
export DEADLINE=$(( $(date +%s) + ${BUDGET:-540} )) TIMEOUT=${TIMEOUT:-150}
for pair in "$@"; do
  bash $g/tp-run.sh "${pair%%:*}" "$out/${pair#*:}.jsonl"
done
cat "$out"/*.err 2>/dev/null | tail -c 30000 >"$out/err.txt"
rm -f "$out"/*.err
