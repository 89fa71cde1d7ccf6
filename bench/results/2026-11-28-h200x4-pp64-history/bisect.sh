#!/usr/bin/env bash
# The analysis of set 64's interleaved pipeline (docs/parallelism.md
# §3.2.12), from the repository root:
#   bash bench/results/2026-11-28-h200x4-pp64-history/bisect.sh > out.txt
# The last stage's history (rank 2) replayed through memplan's allocator and
# address model; memplan's own simulated history of that stage
# (estimate's TestTraceDebug, steps until the cache repeats); and the
# reserved peak with the first N differing stretches of the simulated
# history replaced by the real one's (bench/torch/bisect.py).
set -eu
d=$(dirname "$0")
t=$(mktemp -d)
tar xf "$d/trace-events.tar.xz" -C "$t"
replay() { MEMPLAN_REPLAY=$1 go test -count=1 ./alloc -run TestReplayDebug -v | grep "model: reserved"; }
echo "real history: $(replay "$t/c1-rank2.json")"
MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE_RANK=1 MEMPLAN_TRACE_OUT="$t/sim.json.gz" \
  MEMPLAN_TRACE="../specs/llama-3-8b.yaml --batch 1 --seq 8192 --precision amp-bf16 --optimizer adamw --pp 2 --pp-schedule interleaved --grad-accum 8 --tp 2 --sp --checkpointing none --device h200-141gb" \
  go test -count=1 ./estimate -run TestTraceDebug >/dev/null
echo "simulated history: $(replay "$t/sim.json.gz")"
for n in 0 100 200 240 260 270 271 275 300 500 1000 9471; do
  python3 bench/torch/bisect.py "$t/c1-rank2.json" "$t/sim.json.gz" "$t/n.json.gz" "$n" >/dev/null
  echo "first $n stretches replaced: $(replay "$t/n.json.gz")"
done
rm -r "$t"
