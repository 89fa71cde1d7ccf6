#!/usr/bin/env bash
# grid-budget.sh GRID NAME SECONDS: a single-GPU grid (measure.py lines, as
# grid.sh runs them) on a lent machine, one process per line, lines started
# until SECONDS have passed (the rest listed in skipped.txt); FROM=N starts
# at the N-th line (1-based) for a second call. Writes into $OUT: NAME.jsonl,
# env.txt (date, GPU, driver, library versions), err.txt (the tail of the
# runs' standard error). Held-out sets 70 and 72 ran through it
# (bench/results/2026-11-28-h200-heldout70/run.sh, -heldout72/run.sh).
set -u
grid=${1:?usage: grid-budget.sh GRID NAME SECONDS}
name=${2:?usage: grid-budget.sh GRID NAME SECONDS}
budget=${3:?usage: grid-budget.sh GRID NAME SECONDS}
out=${OUT:-/tmp/out-$name}
mkdir -p "$out"
export HF_HUB_OFFLINE=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "transformers", transformers.__version__, "torchvision", torchvision.__version__)'; } >"$out/env.txt" 2>&1
lines=$(mktemp) one=$(mktemp)
grep -v '^#' "$grid" | grep . | tail -n +"${FROM:-1}" >"$lines"
start=$(date +%s)
while read -r line; do
  if (( $(date +%s) - start > budget )); then echo "skipped: $line" >>"$out/skipped.txt"; continue; fi
  echo "$line" >"$one"
  GRID=$one bash "$(dirname "$0")/grid.sh" "$out/$name.jsonl"
done <"$lines"
[[ -f $out/$name.jsonl.err ]] && tail -c 20000 "$out/$name.jsonl.err" >"$out/err.txt" && rm -f "$out/$name.jsonl.err"
true
