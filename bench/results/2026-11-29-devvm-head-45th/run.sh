#!/usr/bin/env bash
# The forty-fifth session's change to the vocabulary-parallel head (its module's call drops the gathered input,
# then the model's the final norm's output, before the loss; docs/parallelism.md §3.1, "When the head's input
# goes") against the tree in BASE (bf177fe, the forty-fourth session's end): every logged multi-GPU line of bench's
# tests, compared by bench/torch/dist/benchlog_diff.py (output benchlog-diff.txt beside this script), and the
# bundled configs and specs under the layouts (the forty-fourth session's layouts-diff.sh, output layouts-diff.txt).
#   git worktree add --detach /tmp/base bf177fe
#   bash bench/results/2026-11-29-devvm-head-45th/run.sh /tmp/base
set -eu
base=$1
here=$(dirname "$0")
t=$(mktemp -d)
bash bench/torch/dist/benchlog.sh "$base" >"$t/before.txt"
bash bench/torch/dist/benchlog.sh "$PWD" >"$t/after.txt"
python3 bench/torch/dist/benchlog_diff.py "$t/before.txt" "$t/after.txt" >"$here/benchlog-diff.txt"
bash bench/results/2026-11-29-devvm-hf-program-44th/layouts-diff.sh "$base" >"$here/layouts-diff.txt"
rm -r "$t"
