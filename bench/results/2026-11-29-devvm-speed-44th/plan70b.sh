#!/usr/bin/env bash
# The 70B plan on one core at the forty-fourth session's base (36a6849, in BASE) and at this tree, alternately,
# two iterations each (docs/performance.md, "Forty-fourth session"); output plan70b.txt beside this script.
#   git worktree add --detach /tmp/base 36a6849
#   bash bench/results/2026-11-29-devvm-speed-44th/plan70b.sh /tmp/base > bench/results/2026-11-29-devvm-speed-44th/plan70b.txt
set -u
base=$1
uptime
for round in 1 2; do
  for tree in "$base" "$PWD"; do
    echo "== round $round: $(git -C "$tree" rev-parse --short HEAD)"
    (cd "$tree" && GOMAXPROCS=1 go test ./planner -run X -bench 'BenchmarkPlan70B' -benchtime 2x 2>&1 | grep Benchmark)
  done
done
