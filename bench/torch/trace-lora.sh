#!/usr/bin/env bash
# trace-lora.sh OUTDIR: allocator histories of the two GPT-2 amp-bf16 LoRA
# grid lines whose reserved memory the simulation missed (docs/accuracy.md,
# LoRA section): r 8 attn (step 2 grows by one 1.6 GB segment) and r 64
# all (step 1 holds 90 MB more than predicted and step 2 does not grow,
# where the simulation grows by 1.6 GB). One JSON record and one trace each.
set -u
out=${1:?usage: trace-lora.sh OUTDIR}
mkdir -p "$out"
here=$(dirname "$0")
n=0
for line in \
  "specs/gpt2-124m.yaml --batch 8 --seq 1024 --precision amp-bf16 --rank 8 --targets attn" \
  "specs/gpt2-124m.yaml --batch 8 --seq 1024 --precision amp-bf16 --rank 64 --targets all"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout 300 python3 "$here/lora.py" $line --label "$line" --trace "$out/c$n-trace.json" >>"$out/trace-lora.jsonl" 2>>"$out/trace-lora.err"
done
