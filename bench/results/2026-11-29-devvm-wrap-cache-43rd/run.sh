#!/usr/bin/env bash
# Emptying the cache after FSDP2's wrapping as the script's choice
# (model.Training.EmptyCacheAfterWrap, docs/multigpu.md, "Wrapping a model
# built on the host"), from the repository root, with the parent tree
# checked out in BASE:
#   git worktree add --detach /tmp/base 87230d5
#   bash bench/results/2026-11-29-devvm-wrap-cache-43rd/run.sh /tmp/base > out.txt
# For cp.py's held-out moe-llama line (FSDP over dp 2 x cp 2, ep 2; every
# rank traced, bench/results/2026-11-27-h200x4-cp-ep-trace-2), the run's
# history and each tree's simulated history are replayed through memplan's
# allocator and address model (alloc's TestReplayDebug); then every
# logged multi-GPU line of the two trees, side by side
# (bench/torch/dist/benchlog_diff.py), and the single-GPU sets' summary.
set -eu
logs=""
base=$1
here=$PWD
t=$(mktemp -d)
replay() { MEMPLAN_REPLAY=$1 go test -count=1 ./alloc -run TestReplayDebug -v | grep "model: reserved" | cut -d';' -f1; }
cpep="../bench/torch/dist/moe-llama.yaml --batch 2 --seq 16384 --precision amp-bf16 --cp 2 --checkpointing every-block --loss-outside-autocast --dp 2 --zero 3 --fsdp-init gpu --ep 2 --ep-skew 2"
real=$here/bench/results/2026-11-27-h200x4-cp-ep-trace-2/c1-rank0.json.gz
echo "cp x ep line, rank 0's history: $(replay "$real")"
for tree in "$base" "$here"; do
  name=$(git -C "$tree" rev-parse --short HEAD)
  (cd "$tree" && MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE_FIRST=1 MEMPLAN_TRACE_OUT="$t/cpep-$name.json.gz" MEMPLAN_TRACE="$cpep" \
    go test -count=1 ./estimate -run TestTraceDebug >/dev/null)
  echo "$name cp x ep simulated history: $(replay "$t/cpep-$name.json.gz")"
  (cd "$tree" && MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
    grep -o "run .*" | sort) > "$t/log-$name.txt"
  logs="$logs $t/log-$name.txt"
  echo "$name single-GPU sets:"
  (cd "$tree" && go test -count=1 ./bench -run TestEverySingleGPUSet -v 2>&1 | grep -o "held out (.*\|all (.*")
done
python3 bench/torch/dist/benchlog_diff.py $logs
rm -r "$t"
