#!/usr/bin/env bash
# A DTensor's gradients summed out of place (docs/parallelism.md §3.1.9),
# from the repository root, with the parent tree checked out in BASE:
#   git worktree add --detach /tmp/base 7e7a9ce
#   bash bench/results/2026-11-29-devvm-dtensor-sums-42nd/run.sh /tmp/base > out.txt
# For set 64's last stage (torchtitan's plan, Llama-3-8B interleaved over
# pp 2 × tp 2 with sp), DeepSeek-V2-Lite's four layers at tp 2 with sp and
# Llama 4's test shape at tp 2 with sp (transformers' forward, hftp.py's
# plan), each tree's simulated history
# (estimate's TestTraceDebug) is compared with the run's (the stretches of
# requests that differ, bench/torch/bisect.py) and replayed through
# memplan's allocator and address model (alloc's TestReplayDebug); then
# every logged multi-GPU line of the two trees, side by side
# (bench/torch/dist/benchlog_diff.py).
set -eu
logs=""
base=$1
here=$PWD
t=$(mktemp -d)
tar xf bench/results/2026-11-28-h200x4-pp64-history/trace-events.tar.xz -C "$t"
replay() { MEMPLAN_REPLAY=$1 go test -count=1 ./alloc -run TestReplayDebug -v | grep "model: reserved" | cut -d';' -f1; }
stretches() { python3 bench/torch/bisect.py "$1" "$2" "$t/n.json.gz" 0 | head -1; }
p64="../specs/llama-3-8b.yaml --batch 1 --seq 8192 --precision amp-bf16 --optimizer adamw --pp 2 --pp-schedule interleaved --grad-accum 8 --tp 2 --sp --checkpointing none --device h200-141gb"
ds="../model/testdata/hf/deepseek-v2-lite-4layer.json --batch 1 --seq 4096 --precision amp-bf16 --tp 2 --sp --checkpointing none --loss-outside-autocast --fsdp-init meta"
dsreal=$here/bench/results/2026-11-27-h200x4-tp-hf-sp/deepseek-v2-lite-tp2-sp-rank0.json.gz
l4="../model/testdata/hf/llama4-test-4layer.json --batch 1 --seq 4096 --precision amp-bf16 --tp 2 --sp --loss-parallel --checkpointing every-block --loss-outside-autocast --fsdp-init meta"
l4real=$here/bench/results/2026-11-28-h200x2-trace-74/trace74b-c1-rank0.json.gz
echo "set 64, rank 2's history: $(replay "$t/c1-rank2.json")"
echo "DeepSeek-V2-Lite tp 2 sp, rank 0's history: $(replay "$dsreal")"
echo "Llama 4 test shape tp 2 sp, rank 0's history: $(replay "$l4real") (7,192 MiB with the communicator at its first collective, docs/allocator.md §8)"
for tree in "$base" "$here"; do
  name=$(git -C "$tree" rev-parse --short HEAD)
  (cd "$tree" && MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE_RANK=1 MEMPLAN_TRACE_OUT="$t/p64-$name.json.gz" MEMPLAN_TRACE="$p64" \
    go test -count=1 ./estimate -run TestTraceDebug >/dev/null)
  (cd "$tree" && MEMPLAN_TRACE_HF=1 MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE_RANK=1 MEMPLAN_TRACE_OUT="$t/ds-$name.json.gz" MEMPLAN_TRACE="$ds" \
    go test -count=1 ./estimate -run TestTraceDebug >/dev/null)
  (cd "$tree" && MEMPLAN_TRACE_HF=1 MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE_RANK=1 MEMPLAN_TRACE_OUT="$t/l4-$name.json.gz" MEMPLAN_TRACE="$l4" \
    go test -count=1 ./estimate -run TestTraceDebug >/dev/null)
  echo "$name set 64: $(stretches "$t/c1-rank2.json" "$t/p64-$name.json.gz"); simulated history: $(replay "$t/p64-$name.json.gz")"
  echo "$name DeepSeek: $(stretches "$dsreal" "$t/ds-$name.json.gz"); simulated history: $(replay "$t/ds-$name.json.gz")"
  echo "$name Llama 4: $(stretches "$l4real" "$t/l4-$name.json.gz"); simulated history: $(replay "$t/l4-$name.json.gz")"
  (cd "$tree" && MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
    grep -o "run .*" | sort) > "$t/log-$name.txt"
  logs="$logs $t/log-$name.txt"
done
python3 bench/torch/dist/benchlog_diff.py $logs
rm -r "$t"
