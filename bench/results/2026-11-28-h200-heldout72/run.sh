#!/usr/bin/env bash
# Held-out set 72 on one H200 (bench/torch/heldout72.txt), one process per
# line through grid.sh, lines started until 200 s have passed; FROM=N starts
# at the N-th line (1-based) for a second call. Results in $OUT.
set -u
out=${OUT:-/tmp/out72}
mkdir -p "$out"
export HF_HUB_OFFLINE=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "transformers", transformers.__version__, "torchvision", torchvision.__version__)'; } >"$out/env.txt" 2>&1
grep -v '^#' bench/torch/heldout72.txt | grep . | tail -n +"${FROM:-1}" >/tmp/g72
start=$(date +%s)
: >/tmp/g72.one
while read -r line; do
  if (( $(date +%s) - start > 200 )); then echo "skipped: $line" >>"$out/skipped.txt"; continue; fi
  echo "$line" >/tmp/g72.one
  GRID=/tmp/g72.one bash bench/torch/grid.sh "$out/heldout72.jsonl"
done </tmp/g72
[[ -f $out/heldout72.jsonl.err ]] && tail -c 20000 "$out/heldout72.jsonl.err" >"$out/err.txt" && rm -f "$out/heldout72.jsonl.err"
true
