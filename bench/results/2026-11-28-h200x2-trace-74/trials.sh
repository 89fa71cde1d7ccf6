#!/usr/bin/env bash
# The fortieth session's tensor-parallel trials against the multi-GPU bench
# log (docs/allocator.md §8, docs/parallelism.md §3.1.8), on the development
# machine, from the repository root:
#   bash bench/results/2026-11-28-h200x2-trace-74/trials.sh > bench/results/2026-11-28-h200x2-trace-74/trials.txt 2>&1
# Each line the multi-GPU tests log (MEMPLAN_BENCH_LOG) set beside the same
# tree's with a patch beside this script (benchlog_diff.py), and the MLP
# product change (6a2b1de) beside its parent; then the bisection of Llama
# 4's sp history against memplan's simulated one with the communicator
# patch applied.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
date -u; go version; git log --oneline -1
benchlog() { # benchlog REV PATCH OUT: the log of REV with PATCH applied (none: as it is)
  local w; w=$(mktemp -d)
  git worktree add --detach "$w" "$1" >/dev/null 2>&1
  if [[ $2 != none ]]; then (cd "$w" && git apply "$here/$2.patch"); fi
  (cd "$w" && MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
    grep -o "run .*" | sort >"$3")
  git worktree remove --force "$w"
}
echo "== the MLP's product held to the output collective: 6a2b1de against its parent"
benchlog 6a2b1de^ none /tmp/tptrial-a.txt; benchlog 6a2b1de none /tmp/tptrial-b.txt
python3 bench/torch/dist/benchlog_diff.py /tmp/tptrial-a.txt /tmp/tptrial-b.txt | grep -v "^same"
benchlog HEAD none /tmp/tptrial-head.txt
for p in communicator-up nosp-peer wait-hold; do
  echo "== $p.patch against the tree"
  benchlog HEAD $p /tmp/tptrial-$p.txt
  python3 bench/torch/dist/benchlog_diff.py /tmp/tptrial-head.txt /tmp/tptrial-$p.txt | tail -1
done
echo "== Llama 4's tp 2 sp line: memplan's history with the communicator against the run's (bench/torch/bisect.py)"
w=$(mktemp -d); git worktree add --detach "$w" HEAD >/dev/null 2>&1
(cd "$w" && git apply "$here/communicator-up.patch" &&
  MEMPLAN_TRACE_HF=1 MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE="../model/testdata/hf/llama4-test-4layer.json --batch 1 --seq 4096 --precision amp-bf16 --optimizer adamw --tp 2 --sp --loss-parallel --fsdp-init meta --loss-outside-autocast --steps 3 --checkpointing every-block" \
    MEMPLAN_TRACE_OUT=/tmp/tptrial-l4-sim.json.gz go test -count=1 ./estimate -run TestTraceDebug >/dev/null)
git worktree remove --force "$w"
real=$here/trace74b-c1-rank0.json.gz
python3 bench/torch/bisect.py "$real" /tmp/tptrial-l4-sim.json.gz /tmp/tptrial-l4-b.json.gz 0 | tail -1
for n in 0 2 4 8 16 32 64; do
  python3 bench/torch/bisect.py "$real" /tmp/tptrial-l4-sim.json.gz /tmp/tptrial-l4-b.json.gz $n >/dev/null
  echo "first $n stretches the run's: $(MEMPLAN_REPLAY=/tmp/tptrial-l4-b.json.gz go test -count=1 ./alloc -run TestReplayDebug -v | grep 'reserved peak')"
done
