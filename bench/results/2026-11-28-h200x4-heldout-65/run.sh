#!/usr/bin/env bash
# The thirty-eighth session's third device call (four H200s): set 64's
# interleaved pipeline traced (trace-64-pp.txt), then held-out set 65: the
# single-GPU lines two to a GPU, four GPUs at once, then the data-parallel
# lines. Run from the repository root with OUT set.
set -u
export HF_HUB_OFFLINE=1
mkdir -p "$OUT" /tmp/ev
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/env.txt"
python3 -c 'import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)' >>"$OUT/env.txt"
TIMEOUT=200 SNAPDIR=/tmp/snaps bash bench/torch/dist/tp-run.sh bench/torch/dist/trace-64-pp.txt "$OUT/trace.jsonl"
for f in /tmp/snaps/*.pickle; do
  python3 bench/torch/dist/snap2events.py "$f" "/tmp/ev/$(basename "$f" .pickle).json.gz"
done
(cd /tmp/ev && tar cf "$OUT/trace-events.tar" .)
grep -v '^#' bench/torch/heldout65.txt | grep . >/tmp/g65
for i in 0 1 2 3; do
  sed -n "$((2 * i + 1)),$((2 * i + 2))p" /tmp/g65 >/tmp/g65-$i
  CUDA_VISIBLE_DEVICES=$i GRID=/tmp/g65-$i bash bench/torch/grid.sh "/tmp/s65-$i.jsonl" &
done
wait
cat /tmp/s65-?.jsonl >"$OUT/heldout-65.jsonl"  # committed as bench/results/2026-11-28-h200-heldout65.jsonl
cat /tmp/s65-?.jsonl.err 2>/dev/null | tail -c 4000 >"$OUT/single-err.txt"
NGPU=4 bash bench/torch/dist/run.sh bench/torch/dist/heldout-65-train.txt /tmp/d65 "${BUDGET:-200}"
cp /tmp/d65/dist.jsonl "$OUT/heldout-65-train.jsonl"
tail -c 3000 /tmp/d65/log.txt >"$OUT/dist-log.txt"
