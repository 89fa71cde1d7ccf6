#!/usr/bin/env bash
# ep-run.sh GRID OUTDIR: the expert-parallel grids (grid-ep.txt's format:
# "W=2|4 T=SECONDS SPEC train.py-flags") on a 4-GPU machine: the two-GPU
# lines alternately on GPUs 0,1 and 2,3, side by side, then the four-GPU
# lines on all four, each through run.sh (OUTDIR/pair0, pair1, quad).
#   bash bench/torch/dist/ep-run.sh bench/torch/dist/grid-ep.txt /tmp/out
set -u
grid=${1:?usage: ep-run.sh GRID OUTDIR}
out=${2:?usage: ep-run.sh GRID OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
grep -v '^\s*#' "$grid" | awk 'NF && $1 == "W=2" { sub(/^W=2 /, ""); print > (dir "/half" (n++ % 2) ".txt") }
  NF && $1 == "W=4" { sub(/^W=4 /, ""); print > (dir "/quad.txt") }' dir="$out"
for h in 0 1; do
  [[ -f $out/half$h.txt ]] || continue
  CUDA_VISIBLE_DEVICES=$((2 * h)),$((2 * h + 1)) NGPU=2 bash "$here/run.sh" "$out/half$h.txt" "$out/pair$h" &
done
wait
if [[ -f $out/quad.txt ]]; then
  NGPU=4 bash "$here/run.sh" "$out/quad.txt" "$out/quad"
fi
