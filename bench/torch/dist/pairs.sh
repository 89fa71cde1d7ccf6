#!/usr/bin/env bash
# pairs.sh OUTDIR GRID...: runs the two-GPU lines (SCRIPT 2 ARGS) of the tp-run.sh
# grids side by side on a 4-GPU machine, half on GPUs 0,1 and half on GPUs 2,3,
# alternating line by line, the long lines (a spec with 8b in its name) alternating
# on their own so that the two pairs finish together. Each pair appends to
# OUTDIR/pairN.jsonl (and .err) through tp-run.sh; then the four-GPU lines run
# one after the other on all four, into OUTDIR/whole.jsonl (and .err); lines
# needing other GPU counts are left out. Every line is its own torchrun with a
# free rendezvous port (--standalone), so the pairs do not meet.
#
#   TIMEOUT=150 bash bench/torch/dist/pairs.sh OUT bench/torch/dist/cp-heldout.txt bench/torch/dist/grid-pp-interleaved.txt
set -u
export HF_HUB_OFFLINE=1 # transformers configs are read from the tree; no hub
out=${1:?usage: pairs.sh OUTDIR GRID...}
shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
grep -h -v '^\s*#' "$@" | awk 'NF && $2 == 2 { h = ($3 ~ /8b/) ? (m++ % 2) : (n++ % 2); print > (dir "/half" h ".txt") }' dir="$out"
for h in 0 1; do
  [[ -f $out/half$h.txt ]] || continue
  CUDA_VISIBLE_DEVICES=$((2 * h)),$((2 * h + 1)) bash "$here/tp-run.sh" "$out/half$h.txt" "$out/pair$h.jsonl" &
done
wait
grep -h -v '^\s*#' "$@" | awk 'NF && $2 == 4' > "$out/whole.txt"
if [[ -s $out/whole.txt ]]; then
  bash "$here/tp-run.sh" "$out/whole.txt" "$out/whole.jsonl"
fi
