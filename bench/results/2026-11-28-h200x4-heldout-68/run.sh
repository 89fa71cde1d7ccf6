#!/usr/bin/env bash
# Held-out set 68 on four H200s, in three device calls:
#   bash bench/results/2026-11-28-h200x4-heldout-68/run.sh 1   # the train.py lines
#   bash bench/results/2026-11-28-h200x4-heldout-68/run.sh 2   # the first five script lines
#   bash bench/results/2026-11-28-h200x4-heldout-68/run.sh 3   # the other five
# Results go to $OUT (heldout-68-train.jsonl, heldout-68.jsonl, logs, env.txt).
set -u
part=${1:?part 1 or 2}
out=${OUT:-/tmp/out68}
mkdir -p "$out"
g=bench/torch/dist
. bench/torch/dist/machine-env.sh "$out/env-$part.txt"
lines=$(mktemp)
grep -v '^#' $g/heldout-68.txt | grep . >"$lines"
case $part in
1)
  NGPU=4 bash $g/run.sh $g/heldout-68-train.txt "$out/train" 450
  cp "$out/train/dist.jsonl" "$out/heldout-68-train.jsonl"
  cp "$out/train/log.txt" "$out/train-log.txt"
  rm -rf "$out/train"
  exit 0 ;;
2) head -n 5 "$lines" >"$lines.p" ;;
*) tail -n +6 "$lines" >"$lines.p" ;;
esac
MEMPLAN_ROPE_FP32=1 TIMEOUT=150 bash $g/tp-run.sh "$lines.p" "$out/heldout-68-part$part.jsonl"
tail -c 20000 "$out/heldout-68-part$part.jsonl.err" >"$out/err-$part.txt"; rm -f "$out/heldout-68-part$part.jsonl.err"
