#!/usr/bin/env bash
# Forty-fifth session, one H200: a tp-run.sh grid's fake ranks with their allocator histories (Python stacks), each
# converted by snap2events.py to cN-rank0.json.gz; records in $OUT/NAME.jsonl, lines not started within BUDGET
# seconds (default 420) recorded as not run; env.txt and err.txt beside them.
#   bash bench/results/2026-11-29-h200-fake-45/trace.sh bench/torch/dist/trace-86.txt trace-86
set -u
grid=$1 name=$2
out=${OUT:-/tmp/out-trace45}
mkdir -p "$out/snaps"
g=bench/torch/dist
. $g/machine-env.sh "$out/env.txt"
export DEADLINE=$(( $(date +%s) + ${BUDGET:-420} )) TIMEOUT=${TIMEOUT:-200}
MEMPLAN_SNAPSHOT_ENTRIES=1000000 SNAPDIR=$out/snaps bash $g/tp-run.sh "$grid" "$out/$name.jsonl"
for p in "$out"/snaps/*.pickle; do
  [[ -f $p ]] && python3 $g/snap2events.py "$p" "$out/$(basename "${p%.pickle}").json.gz" --final-segments
done
rm -rf "$out/snaps"
tail -c 20000 "$out/$name.jsonl.err" >"$out/err.txt" 2>/dev/null
rm -f "$out/$name.jsonl.err"
