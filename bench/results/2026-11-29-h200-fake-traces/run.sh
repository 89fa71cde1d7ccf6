#!/usr/bin/env bash
# Forty-fourth session, one H200: bench/torch/dist/trace-82.txt's three fake
# ranks with their allocator histories (Python stacks), each converted by
# snap2events.py to cN-rank0.json.gz; records in $OUT/trace-82.jsonl, lines
# not started within BUDGET seconds (default 360) recorded as not run.
#   bash bench/results/2026-11-29-h200-fake-traces/run.sh
set -u
out=${OUT:-/tmp/out-trace82}
mkdir -p "$out/snaps"
g=bench/torch/dist
. $g/machine-env.sh "$out/env.txt"
export DEADLINE=$(( $(date +%s) + ${BUDGET:-360} )) TIMEOUT=${TIMEOUT:-150}
MEMPLAN_SNAPSHOT_ENTRIES=1000000 SNAPDIR=$out/snaps bash $g/tp-run.sh $g/trace-82.txt "$out/trace-82.jsonl"
for p in "$out"/snaps/*.pickle; do
  [[ -f $p ]] && python3 $g/snap2events.py "$p" "$out/$(basename "${p%.pickle}").json.gz" --final-segments
done
rm -rf "$out/snaps"
tail -c 20000 "$out/trace-82.jsonl.err" >"$out/err.txt" 2>/dev/null
rm -f "$out/trace-82.jsonl.err"
