#!/usr/bin/env bash
# The thirty-second session's cost check: the 50 × 12 report and the 7B
# in-process estimate at the session's base (20e9c5c, a worktree in
# /tmp/base) and at HEAD, alternately, on one core.
set -u
for round in 1 2; do
  for tree in /tmp/base /work/main; do
    echo "== $tree round $round"
    (cd "$tree" && GOMAXPROCS=1 go test ./report -run X -bench Report50x12 -benchtime 1x 2>&1 | grep Benchmark)
    (cd "$tree" && GOMAXPROCS=1 go test ./estimate -run X -bench '^BenchmarkEstimate$/7b' -benchtime 300x 2>&1 | grep Benchmark)
  done
done
