#!/usr/bin/env bash
# The two bisections of the forty-fifth session (docs/accuracy.md, forty-fifth session), from the repository root;
# output bisect.txt beside this script. For each: the run's committed history replayed through memplan's allocator,
# memplan's own requests (estimate's TestTraceDebug) replayed, and the simulated history with its first N differing
# stretches taken from the run's (bench/torch/bisect.py), for the N that matter.
#   1. held-out set 52's tiny MoE at tp 2 (the head's input): since the change memplan's own requests replay to the
#      run's reserve (its line +5.0% → +0.0% reserved in benchlog-diff.txt beside this script);
#   2. set 87's Llama-3-8B at cp 8 under FSDP2 (the rotary embedding's stretch): N = 0, 877, 878.
#   bash bench/results/2026-11-29-devvm-head-45th/bisect.sh > bench/results/2026-11-29-devvm-head-45th/bisect.txt
set -eu
t=$(mktemp -d)
replay() { MEMPLAN_REPLAY=$(realpath "$1") go test -count=1 ./alloc -run TestReplayDebug -v 2>&1 | grep 'model: reserved' | awk '{print $4, "MiB"}'; }
sim() { (cd estimate && MEMPLAN_TRACE="$2" MEMPLAN_TRACE_HF=${3:-} MEMPLAN_TRACE_STEPS=1 MEMPLAN_TRACE_OUT=$1 \
  go test -count=1 -run TestTraceDebug . >/dev/null); }
hybrid() { python3 bench/torch/bisect.py "$1" "$2" "$t/h.json.gz" "$3" >"$t/h.txt"; head -1 "$t/h.txt" >&2; replay "$t/h.json.gz"; }

echo "== 1. tiny Qwen3 MoE, tp 2, sp, 4,096 tokens, checkpointed (held-out set 52)"
real=bench/results/2026-11-28-h200x2-tp-moe-52-trace/c1-rank0.json.gz
sim "$t/moe.json.gz" "../model/testdata/hf/tiny-qwen3-moe.json --batch 1 --seq 4096 --precision amp-bf16 --tp 2 --sp --checkpointing every-block --loss-outside-autocast --fsdp-init meta --device h200-141gb" 1
echo "the run's history replayed: $(replay $real)"
echo "memplan's requests replayed: $(replay "$t/moe.json.gz")"

echo "== 2. Llama-3-8B, cp 8, FSDP2, 131,072 tokens, checkpointed, one fake rank (held-out set 87)"
real=bench/results/2026-11-29-h200-fake-45/trace87-c1-rank0.json.gz
sim "$t/cp8.json.gz" "../specs/llama-3-8b.yaml --batch 1 --seq 131072 --precision amp-bf16 --optimizer adamw --cp 8 --zero 3 --fsdp-root keep --fsdp-init gpu --loss-outside-autocast --steps 3 --checkpointing every-block --device h200-141gb"
echo "the run's history replayed: $(replay $real)"
echo "memplan's requests replayed: $(replay "$t/cp8.json.gz")"
for n in 877 878; do
  echo "the first $n large-pool stretches from the run: $(hybrid $real "$t/cp8.json.gz" $n 2>&1 | tr '\n' ' ')"
done
python3 bench/torch/bisect.py $real "$t/cp8.json.gz" "$t/h.json.gz" 878 | sed -n 2,40p
rm -r "$t"
