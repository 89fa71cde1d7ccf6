#!/usr/bin/env bash
# The fifteenth session's speed figures (docs/performance.md, "Fifteenth
# session"), on the 2-core development machine at GOMAXPROCS=1, one run each
# (this machine's wall times vary by about ±30%; the estimate counts do not).
# Builds the planner's and the report's test binaries at each commit named:
#   6186567  the session's base
#   432fcf5  estimates stop at the dominance level (estimate.Options.StopAbove)
#   490eed7  estimates stop 3% above the limit
#   ee44f10  no probes of a family's lightest layouts with a stopping oracle
#   HEAD     the session's end
# and, at the base and the end, the report's benchmark and the instructions
# of one 7B estimate (bench/callgrind.sh; needs valgrind).
# Usage: bash bench/results/2026-11-26-devvm-speed-15th/run.sh > out.txt
set -u
root=$(git rev-parse --show-toplevel)
for c in 6186567 432fcf5 490eed7 ee44f10 HEAD; do
  w=$(mktemp -d)
  git -C "$root" worktree add --detach "$w/t" "$c" >/dev/null 2>&1
  (cd "$w/t" && go test -c -o "$w/pl.test" ./planner && go test -c -o "$w/rep.test" ./report) || exit 1
  echo "== $c $(git -C "$root" rev-parse --short "$c") $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd "$w/t/planner" && GOMAXPROCS=1 "$w/pl.test" -test.run X -test.bench 'BenchmarkPlan70B/simulator' -test.benchtime 1x | grep Benchmark)
  if [ "$c" = 6186567 ] || [ "$c" = HEAD ]; then
    (cd "$w/t/report" && GOMAXPROCS=1 "$w/rep.test" -test.run X -test.bench 'Report50x12$' -test.benchtime 1x | grep Benchmark)
    (cd "$w/t" && bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 11)
  fi
  git -C "$root" worktree remove --force "$w/t"
  rm -rf "$w"
done
echo "go $(go version | cut -d' ' -f3), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
