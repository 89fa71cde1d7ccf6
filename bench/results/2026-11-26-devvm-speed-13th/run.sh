#!/bin/bash
# Thirteenth session's speed figures on the development machine (2 shared
# cores, Go 1.26.8): the session's base (7cd95fe) and its end, alternating,
# GOMAXPROCS=1. BASE is a worktree of 7cd95fe (git worktree add --detach
# /tmp/base 7cd95fe), run from the repository root.
set -u
BASE=${BASE:-/tmp/base}
for round in 1 2; do
  for tree in "$BASE" .; do
    echo "== round $round: $(git -C "$tree" log --oneline -1 | cut -c1-60)"
    (cd "$tree" && GOMAXPROCS=1 go test ./estimate -run X -bench 'BenchmarkEstimate$/(gpt2|7b-32layer|gpt2-xl|llama-3-70b|70b-pp8-acc32)$' -benchtime 5x 2>&1 | grep Benchmark)
    (cd "$tree" && GOMAXPROCS=1 go test ./report -run X -bench 'Report50x12$' -benchtime 1x 2>&1 | grep Benchmark)
    (cd "$tree" && GOMAXPROCS=1 go test ./planner -run X -bench 'Plan70B/simulator' -benchtime 1x 2>&1 | grep Benchmark)
  done
done
