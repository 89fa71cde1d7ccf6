#!/usr/bin/env bash
# The fourteenth session's speed figures (docs/performance.md, "Fourteenth
# session"), on the 2-core development machine at GOMAXPROCS=1, one run each
# (this machine's wall times vary by about ±30%; the estimate counts do not).
# Builds the planner's and the report's test binaries at each commit named:
#   79476e4  the session's base
#   a0ab5de  cp × tp simulated, both ends of the ring
#   5763615  rank 0 of the ring only
#   aa9ad8a  the interleaved schedule with FSDP simulated
#   0664aea  the interleaved last stage's logits in the bound
#   HEAD     the session's end
# Usage: bash bench/results/2026-11-26-devvm-speed-14th/run.sh > out.txt
set -u
root=$(git rev-parse --show-toplevel)
for c in 79476e4 a0ab5de 5763615 aa9ad8a 0664aea HEAD; do
  w=$(mktemp -d)
  git -C "$root" worktree add --detach "$w/t" "$c" >/dev/null 2>&1
  (cd "$w/t" && go test -c -o "$w/pl.test" ./planner && go test -c -o "$w/rep.test" ./report) || exit 1
  echo "== $c $(git -C "$root" rev-parse --short "$c") $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd "$w/t/planner" && GOMAXPROCS=1 "$w/pl.test" -test.run X -test.bench 'BenchmarkPlan70B/simulator' -test.benchtime 1x | grep Benchmark)
  if [ "$c" = 79476e4 ] || [ "$c" = HEAD ]; then
    (cd "$w/t/report" && GOMAXPROCS=1 "$w/rep.test" -test.run X -test.bench 'Report50x12$' -test.benchtime 1x | grep Benchmark)
  fi
  git -C "$root" worktree remove --force "$w/t"
  rm -rf "$w"
done
echo "go $(go version | cut -d' ' -f3), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
