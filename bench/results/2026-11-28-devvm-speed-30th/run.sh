#!/bin/bash
# The thirtieth session's cost check (docs/performance.md, "Thirtieth
# session"): the 7B in-process estimate and the 50 × 12 report at the
# session's base (27025e0) and end, alternately, on one core. BIN holds
# test binaries built with `go test -c` in each tree (est-base.test,
# rep-base.test from a worktree of 27025e0; est-head.test, rep-head.test
# from the end); both run in this tree's package directories (the specs
# and configs they read did not change in the session).
#   bash run.sh BIN > out.txt
set -u
bin=$1
here=$(cd "$(dirname "$0")/../../.." && pwd)
uptime
for round in 1 2 3; do
  for t in base head; do
    (cd "$here/estimate" && GOMAXPROCS=1 "$bin/est-$t.test" -test.run X -test.bench '^BenchmarkEstimate$/^7b-32layer$' -test.benchtime 400x | grep Bench | sed "s/^/$t round $round: /")
    (cd "$here/report" && GOMAXPROCS=1 "$bin/rep-$t.test" -test.run X -test.bench 'Report50x12' -test.benchtime 2x | grep Bench | sed "s/^/$t round $round: /")
  done
done
uptime
