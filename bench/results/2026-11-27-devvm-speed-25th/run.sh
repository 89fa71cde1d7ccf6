#!/usr/bin/env bash
# The twenty-fifth session's speed figures (docs/performance.md, "Twenty-fifth
# session"; docs/planner.md): the 50 x 12 report at the session's base
# (5bb6d5e) and at HEAD, alternately, two rounds on one core; the 7B
# in-process estimate; DeepSeek-V3's plan on all cores and on one, and at the
# base on all cores.
#   bash bench/results/2026-11-27-devvm-speed-25th/run.sh > out.txt
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
echo "# $(date -u) $(go version) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg); HEAD $(git rev-parse --short HEAD)"
tmp=$(mktemp -d)
git worktree add --detach "$tmp/base" 5bb6d5e -q
(cd "$tmp/base" && go test -c -o "$tmp/report-base.test" ./report && go build -o "$tmp/memplan-base" ./cmd/memplan)
git worktree remove --force "$tmp/base" && git worktree prune
go test -c -o "$tmp/report-head.test" ./report
for round in 1 2; do
  for v in base head; do
    echo "round $round $v: $(cd report && GOMAXPROCS=1 "$tmp/report-$v.test" -test.run X -test.bench Report50x12 -test.benchtime 2x | grep Benchmark)"
  done
done
GOMAXPROCS=1 go test ./estimate -run X -bench '^BenchmarkEstimate$/7b' -benchtime 300x | grep Benchmark
go build -o "$tmp/memplan" ./cmd/memplan
for procs in "$(nproc)" 1; do
  s=$(date +%s.%N)
  GOMAXPROCS=$procs "$tmp/memplan" plan --hf model/testdata/hf/deepseek-v3.json --seq 4096 --global-batch 1024 --device h200-141gb >"$tmp/plan.txt" 2>&1 || true
  e=$(date +%s.%N)
  echo "plan deepseek-v3 GOMAXPROCS=$procs: $(awk "BEGIN{printf \"%.1f\", $e - $s}") s wall; $(sed -n 2p "$tmp/plan.txt")"
  sed -n 5p "$tmp/plan.txt"
done
s=$(date +%s.%N)
"$tmp/memplan-base" plan --hf model/testdata/hf/deepseek-v3.json --seq 4096 --global-batch 1024 --device h200-141gb >"$tmp/plan.txt" 2>&1 || true
e=$(date +%s.%N)
echo "plan deepseek-v3 at the base, GOMAXPROCS=$(nproc): $(awk "BEGIN{printf \"%.1f\", $e - $s}") s wall; $(sed -n 2p "$tmp/plan.txt")"
sed -n 4p "$tmp/plan.txt"
rm -rf "$tmp"
