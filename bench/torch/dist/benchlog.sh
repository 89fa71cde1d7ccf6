#!/usr/bin/env bash
# benchlog.sh TREE: the "run LABEL: A% R% D%" lines every multi-GPU test of
# bench prints for the working tree at TREE (MEMPLAN_BENCH_LOG=1), sorted, on
# standard output: what bench/torch/dist/benchlog_diff.py sets side by side
# for two trees.
#   bash bench/torch/dist/benchlog.sh /tmp/base > /tmp/before.txt
set -eu
cd "$1"
MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
  grep -o "run .*" | sort
