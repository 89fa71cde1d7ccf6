#!/usr/bin/env bash
# The ring's backward in pieces (1bbcc4f) alone: every logged multi-GPU line at its parent (1b7c61e, in BASE) and
# at this tree, compared by bench/torch/dist/benchlog_diff.py (lines both have); output ring-backward-diff.txt.
#   git worktree add --detach /tmp/base 1b7c61e
#   bash bench/results/2026-11-29-devvm-hf-program-44th/ring-backward.sh /tmp/base > bench/results/2026-11-29-devvm-hf-program-44th/ring-backward-diff.txt
set -eu
base=$1
t=$(mktemp -d)
for tree in "$base" "$PWD"; do
  (cd "$tree" && MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
    grep -o "run .*" | sort) >"$t/$(basename "$tree").txt"
done
python3 bench/torch/dist/benchlog_diff.py "$t/$(basename "$base").txt" "$t/$(basename "$PWD").txt"
rm -r "$t"
