#!/usr/bin/env bash
# sweep.sh: where each committed allocator trace first differs from
# memplan's simulated program, compared by block identity (align.py
# --ident). Run from the repository root; needs Go and Python 3. Prints,
# per trace, "first difference at N" (the event index) or "no difference
# in N events" (the simulated steps match PyTorch's block for block).
set -u
R=bench/results
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
while IFS='|' read -r trace label; do
  [[ -z $trace || $trace == \#* ]] && continue
  # shellcheck disable=SC2086
  set -- $label
  spec=$1
  shift
  hf="" args=()
  for a in "$@"; do if [[ $a == --hf ]]; then hf=1; else args+=("$a"); fi; done
  if ! MEMPLAN_TRACE_HF=$hf MEMPLAN_TRACE="../$spec ${args[*]} --device h100-80gb" MEMPLAN_TRACE_OUT=$out/sim.json.gz \
    go test ./estimate -run TraceDebug -count=1 >/dev/null 2>&1; then
    echo "$trace: simulation failed"
    continue
  fi
  echo "$trace: $(python3 bench/torch/align.py --ident "$R/$trace" "$out/sim.json.gz" 2>&1 | head -1)"
done <<'LIST'
# trace (under bench/results) | its configuration (measure.py flags)
2026-11-23-h100-traces/llama1b-eager.json.gz|specs/llama-3.2-1b.yaml --batch 1 --seq 1024 --attention eager
2026-11-23-h100-traces/whisper.json.gz|specs/whisper-base-encoder.yaml --batch 64 --precision amp-bf16 --checkpointing every-block
2026-11-23-h100-traces/moe-split64.json.gz|model/testdata/hf/tiny-qwen3-moe.json --hf --batch 4 --seq 1024 --precision bf16 --checkpointing every-block --alloc-conf max_split_size_mb:64
2026-11-23-h100-traces/moe-amp.json.gz|model/testdata/hf/tiny-qwen3-moe.json --hf --batch 4 --seq 1024
2026-11-23-h100-traces/cnn-gn.json.gz|specs/cnn-groupnorm.yaml --batch 128 --checkpointing every-block
2026-11-23-h100-traces/gpt2xl-round2.json.gz|specs/gpt2-xl.yaml --batch 4 --alloc-conf roundup_power2_divisions:2
2026-11-23-h100-traces/gpt2xl-bf16ckpt.json.gz|specs/gpt2-xl.yaml --batch 6 --precision bf16 --checkpointing every-block
2026-11-23-h100-traces2/vit-ckpt.json.gz|specs/vit-b-16.yaml --batch 128 --checkpointing every-block
2026-11-23-h100-traces2/cnn-bf16-b128.json.gz|specs/cnn-groupnorm.yaml --batch 128 --precision bf16
2026-11-23-h100-traces2/cnn-bf16-b32.json.gz|specs/cnn-groupnorm.yaml --batch 32 --precision bf16
2026-11-23-h100-traces2/moe-ckpt-amp.json.gz|model/testdata/hf/tiny-qwen3-moe.json --hf --batch 4 --seq 1024 --checkpointing every-block
moe-traces/moe-bf16-ckpt/events.json.gz|model/testdata/hf/tiny-qwen3-moe.json --hf --batch 4 --seq 1024 --precision bf16 --checkpointing every-block
2026-11-26-h200x4-ddp-fakepg/trace.json.gz|specs/llama-3.2-1b.yaml --batch 2 --dp 8 --zero 0
LIST
