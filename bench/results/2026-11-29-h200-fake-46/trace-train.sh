#!/usr/bin/env bash
# Forty-sixth session, one H200: a run.sh grid's fake-process-group train.py lines with --snapshot (the allocator's
# history of step 1), each history converted by snap2events.py to $OUT/NAME-cN-rank0.json.gz; records in
# $OUT/NAME.jsonl, the log's tail in $OUT/log-NAME.txt, the machine in $OUT/env-NAME.txt.
#   bash bench/results/2026-11-29-h200-fake-46/trace-train.sh bench/torch/dist/trace-88.txt trace-88
set -u
grid=$1 name=$2
out=${OUT:-/tmp/out-trace46}
g=bench/torch/dist
mkdir -p "$out"
. $g/machine-env.sh "$out/env-$name.txt"
NGPU=1 bash $g/run.sh "$grid" "$out/r" "${BUDGET:-420}"
cp "$out/r/dist.jsonl" "$out/$name.jsonl"
tail -c 20000 "$out/r/log.txt" >"$out/log-$name.txt"
for t in "$out"/r/snapshots*.tar; do
  [[ -f $t ]] && tar -C "$out/r" -xf "$t"
done
for p in "$out"/r/c*-snapshot-rank*.pickle.gz; do
  [[ -f $p ]] || continue
  b=$(basename "$p" .pickle.gz)
  python3 $g/snap2events.py "$p" "$out/$name-${b/-snapshot/}.json.gz" --final-segments
done
rm -rf "$out/r"
