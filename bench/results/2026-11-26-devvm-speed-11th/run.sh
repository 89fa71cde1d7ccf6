#!/bin/bash
# The eleventh session's dev-VM speed figures (docs/performance.md, "Eleventh
# session"): BenchmarkPlan70B at GOMAXPROCS=2 before (21d24d5, stages one
# after another) and after (the session's end), alternating, two rounds; and
# bench/callgrind.sh's instruction count for the 7B estimate at the session's
# base (3f1d6a0) and end. Run from the repository root:
#   bash bench/results/2026-11-26-devvm-speed-11th/run.sh > bench/results/2026-11-26-devvm-speed-11th/out.txt 2>&1
set -u
root=$PWD
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" 2>/dev/null; git worktree remove --force "$tmp/base" 2>/dev/null; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/old" 21d24d5 >/dev/null 2>&1
git worktree add --detach "$tmp/base" 3f1d6a0 >/dev/null 2>&1
(cd "$tmp/old" && go test -c -o "$tmp/planner-old.test" ./planner)
go test -c -o "$tmp/planner-new.test" ./planner
echo "# $(date -u +%FT%TZ) $(uname -m) $(nproc) cores, $(go version), load $(cut -d' ' -f1-3 /proc/loadavg)"
cd planner
for round in 1 2; do
  for v in old new; do
    echo "== round $round $v GOMAXPROCS=2"
    GOMAXPROCS=2 "$tmp/planner-$v.test" -test.run X -test.bench 'Plan70B/simulator' -test.benchtime 1x | grep Benchmark
  done
done
cd "$root"
for v in base new; do
  dir=$root; [ $v = base ] && dir=$tmp/base
  echo "== callgrind $v"
  (cd "$dir" && bash "$root/bench/callgrind.sh" ./estimate '^BenchmarkEstimate$/^7b-32layer$')
  (cd "$dir" && bash "$root/bench/callgrind.sh" ./estimate '^BenchmarkEstimate$/^7b-32layer$')
done
echo "# end $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
