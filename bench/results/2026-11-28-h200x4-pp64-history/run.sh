#!/usr/bin/env bash
# The thirty-eighth session's fourth device call (four H200s): set 64's
# interleaved pipeline with its whole allocator history (600,000 entries:
# the first trace kept only the last 100,000), set 65's data-parallel line
# the third call's budget skipped, and Qwen's tied interleaved pipeline with
# the rotary tables in fp32 (rerun-38-rope.txt). Run from the repository
# root with OUT set.
set -u
export HF_HUB_OFFLINE=1
mkdir -p "$OUT" /tmp/ev
MEMPLAN_SNAPSHOT_ENTRIES=600000 TIMEOUT=240 SNAPDIR=/tmp/snaps \
  bash bench/torch/dist/tp-run.sh bench/torch/dist/trace-64-pp.txt "$OUT/trace.jsonl"
for f in /tmp/snaps/*rank2.pickle /tmp/snaps/*rank0.pickle; do
  python3 bench/torch/dist/snap2events.py "$f" "/tmp/ev/$(basename "$f" .pickle).json.gz"
done
(cd /tmp/ev && tar cf "$OUT/trace-events.tar" .)
MEMPLAN_ROPE_FP32=1 TIMEOUT=150 bash bench/torch/dist/tp-run.sh bench/torch/dist/rerun-38-rope.txt "$OUT/rope.jsonl"
grep -v '^#' bench/torch/dist/heldout-65-train.txt | tail -1 >/tmp/g65last
NGPU=4 bash bench/torch/dist/run.sh /tmp/g65last /tmp/d65 200
cp /tmp/d65/dist.jsonl "$OUT/heldout-65-train-last.jsonl"
