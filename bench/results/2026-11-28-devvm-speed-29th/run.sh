#!/usr/bin/env bash
# The twenty-ninth session's changes checked for cost: the 7B estimate and the
# 50 × 12 report at the session's base (b598eeb) and at its end, on one core,
# alternately. Run from the repository root with the base checked out in
# /tmp/base (git worktree add --detach /tmp/base b598eeb).
set -eu
(cd /tmp/base && go test -c -o /tmp/est-base.test ./estimate && go test -c -o /tmp/rep-base.test ./report)
go test -c -o /tmp/est-head.test ./estimate
go test -c -o /tmp/rep-head.test ./report
cd estimate
for i in 1 2 3; do for b in base head; do
  echo -n "$b "; GOMAXPROCS=1 /tmp/est-$b.test -test.run X -test.bench '^BenchmarkEstimate$/7b' -test.benchtime 300x | grep Bench
done; done
cd ../report
for i in 1 2; do for b in base head; do
  echo -n "$b "; GOMAXPROCS=1 /tmp/rep-$b.test -test.run X -test.bench Report50x12 -test.benchtime 1x | grep Bench
done; done
uptime
