#!/usr/bin/env bash
# Held-out set 75 on two H200s, in two device calls:
#   bash bench/results/2026-11-29-h200x2-heldout-75/run.sh 1   # the four script lines (cp.py, pp.py, tp.py)
#   bash bench/results/2026-11-29-h200x2-heldout-75/run.sh 2   # the six train.py lines
#   bash bench/results/2026-11-29-h200x2-heldout-75/run.sh 3   # the last three, which part 2's call did not reach
# Results go to $OUT (heldout-75.jsonl, heldout-75-train.jsonl, part 3's heldout-75-train-b.jsonl, logs,
# env-N.txt).
set -u
part=${1:?part 1 or 2}
out=${OUT:-/tmp/out75}
mkdir -p "$out"
g=bench/torch/dist
. bench/torch/dist/machine-env.sh "$out/env-$part.txt"
case $part in
1)
  MEMPLAN_ROPE_FP32=1 TIMEOUT=150 bash $g/tp-run.sh $g/heldout-75.txt "$out/heldout-75.jsonl"
  tail -c 20000 "$out/heldout-75.jsonl.err" >"$out/err-1.txt"; rm -f "$out/heldout-75.jsonl.err" ;;
3)
  grep -v '^#' $g/heldout-75-train.txt | tail -n 3 >"$out/rest.txt"
  NGPU=2 bash $g/run.sh "$out/rest.txt" "$out/train" 420
  cp "$out/train/dist.jsonl" "$out/heldout-75-train-b.jsonl"
  cp "$out/train/log.txt" "$out/train-log-b.txt"
  rm -rf "$out/train" "$out/rest.txt" ;;
*)
  NGPU=2 bash $g/run.sh $g/heldout-75-train.txt "$out/train" 420
  cp "$out/train/dist.jsonl" "$out/heldout-75-train.jsonl"
  cp "$out/train/log.txt" "$out/train-log.txt"
  rm -rf "$out/train" ;;
esac
