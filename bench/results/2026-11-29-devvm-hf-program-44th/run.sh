#!/usr/bin/env bash
# The forty-fourth session's estimator changes (the ring's concatenations, 4012df3; a transformers config
# running transformers' forward under the parallel layouts, d6fd41a; the ring's backward in pieces, 1bbcc4f)
# against the tree in BASE (36a6849, the session's fake-group sets committed): every logged multi-GPU line of
# bench's tests, compared by
# bench/torch/dist/benchlog_diff.py (output benchlog-diff.txt beside this script), and the bundled configs under
# the layouts (layouts-diff.sh, output layouts-diff.txt).
#   git worktree add --detach /tmp/base 36a6849
#   bash bench/results/2026-11-29-devvm-hf-program-44th/run.sh /tmp/base
set -eu
base=$1
here=$(dirname "$0")
t=$(mktemp -d)
for tree in "$base" "$PWD"; do
  (cd "$tree" && MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
    grep -o "run .*" | sort) >"$t/$(basename "$tree").txt"
done
python3 bench/torch/dist/benchlog_diff.py "$t/$(basename "$base").txt" "$t/$(basename "$PWD").txt" >"$here/benchlog-diff.txt"
bash "$here/layouts-diff.sh" "$base" >"$here/layouts-diff.txt"
rm -r "$t"
