#!/usr/bin/env bash
# costcheck.sh BASE_TREE HEAD_TREE [ROUNDS]: a session's cost check — the
# 50 × 12 report and the 7B in-process estimate in two checkouts (the
# session's base, say a worktree, and its end), alternately, on one core,
# ROUNDS times (default 2). Times depend on the machine's load; compare
# them only within one run, and the instruction counts of bench/callgrind.sh
# across runs (docs/performance.md).
set -u
base=${1:?usage: costcheck.sh BASE_TREE HEAD_TREE [ROUNDS]}
head=${2:?usage: costcheck.sh BASE_TREE HEAD_TREE [ROUNDS]}
for round in $(seq "${3:-2}"); do
  for tree in "$base" "$head"; do
    echo "== $tree round $round"
    (cd "$tree" && GOMAXPROCS=1 go test ./report -run X -bench Report50x12 -benchtime 1x 2>&1 | grep Benchmark)
    (cd "$tree" && GOMAXPROCS=1 go test ./estimate -run X -bench '^BenchmarkEstimate$/7b' -benchtime 300x 2>&1 | grep Benchmark)
  done
done
