#!/usr/bin/env bash
# Interleaved one-core benchmarks of the sixth session's first and last
# commits on the development VM. Build each commit's test binaries first,
# from a detached worktree:
#   git worktree add --detach /tmp/wC C && (cd /tmp/wC && go test -c -o /tmp/rep-C.test ./report && go test -c -o /tmp/est-C.test ./estimate)
# for C in b33df81 and HEAD (the commit this file was added in; name its
# binaries rep-HEAD.test and est-HEAD.test). Then, from the repository root:
#   bash bench/results/2026-11-23-devvm-speed-6th/run.sh > OUT.txt
set -u
for round in 1 2 3 4; do
  for c in b33 HEAD; do
    echo "== round $round $c load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd estimate && GOMAXPROCS=1 /tmp/est-$c.test -test.run XXX -test.bench 'BenchmarkEstimate$/(gpt2$|7b)' -test.benchtime 60x | grep Bench)
    (cd report && GOMAXPROCS=1 /tmp/rep-$c.test -test.run XXX -test.bench BenchmarkReport50x12 -test.benchtime 2x | grep Bench)
  done
done
