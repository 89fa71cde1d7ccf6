#!/usr/bin/env bash
# Twenty-third session: the 7B in-process estimates at the session's base
# (7caa8c9, checked out in a worktree at $BASE) and at HEAD, interleaved,
# three rounds, one core. Run from the repository root.
set -eu
base=${BASE:-/tmp/base}
for i in 1 2 3; do
  for d in "$base" .; do
    (cd "$d" && GOMAXPROCS=1 go test ./estimate -run X -bench 'Estimate/7b-32layer' -benchtime 200x -count 1 |
      grep Benchmark | awk -v d="$d" '{print d, $1, $3, $4}')
  done
done
uptime
