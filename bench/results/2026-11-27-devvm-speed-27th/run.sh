#!/usr/bin/env bash
# The twenty-seventh session's speed figures (docs/performance.md,
# "Twenty-seventh session"): the 50 x 12 report and the 7B in-process
# estimate at the session's base (ef16e50) and at HEAD, alternately, two
# rounds on one core; the plans that sequence and expert parallelism beside
# tensor parallelism now reach for DeepSeek-V3 and gpt-oss-120b, at HEAD and
# at the base, on all cores and on one.
#   bash bench/results/2026-11-27-devvm-speed-27th/run.sh > out.txt
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
echo "# $(date -u) $(go version) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg); HEAD $(git rev-parse --short HEAD)"
tmp=$(mktemp -d)
git worktree add --detach "$tmp/base" ef16e50 -q
(cd "$tmp/base" && go test -c -o "$tmp/report-base.test" ./report && go test -c -o "$tmp/estimate-base.test" ./estimate &&
  go build -o "$tmp/memplan-base" ./cmd/memplan)
git worktree remove --force "$tmp/base" && git worktree prune
go test -c -o "$tmp/report-head.test" ./report
go test -c -o "$tmp/estimate-head.test" ./estimate
for round in 1 2; do
  for v in base head; do
    echo "round $round $v: $(cd report && GOMAXPROCS=1 "$tmp/report-$v.test" -test.run X -test.bench Report50x12 -test.benchtime 2x | grep Benchmark)"
    echo "round $round $v: $(cd estimate && GOMAXPROCS=1 "$tmp/estimate-$v.test" -test.run X -test.bench '^BenchmarkEstimate$/7b' -test.benchtime 300x | grep Benchmark | tr '\n' ' ')"
  done
done
go build -o "$tmp/memplan" ./cmd/memplan
plan() { # label binary procs args...
  local label=$1 bin=$2 procs=$3
  shift 3
  s=$(date +%s.%N)
  GOMAXPROCS=$procs "$bin" plan "$@" >"$tmp/plan.txt" 2>&1 || true
  e=$(date +%s.%N)
  echo "plan $label GOMAXPROCS=$procs: $(awk "BEGIN{printf \"%.1f\", $e - $s}") s wall; $(grep -m1 layouts "$tmp/plan.txt")"
  grep -m1 '^1 ' "$tmp/plan.txt" || grep -m1 -i 'no layout' "$tmp/plan.txt" || true
}
ds=(--hf model/testdata/hf/deepseek-v3.json --seq 4096 --global-batch 1024 --device h200-141gb)
ds64=(--hf model/testdata/hf/deepseek-v3.json --seq 4096 --global-batch 64 --device h200-141gb)
oss=(--hf model/testdata/hf/gpt-oss-120b.json --seq 4096 --global-batch 64 --device h100-80gb)
for procs in "$(nproc)" 1; do
  plan deepseek-v3 "$tmp/memplan" "$procs" "${ds[@]}"
  plan "deepseek-v3 gb64" "$tmp/memplan" "$procs" "${ds64[@]}"
  plan gpt-oss-120b "$tmp/memplan" "$procs" "${oss[@]}"
done
plan "deepseek-v3 at the base" "$tmp/memplan-base" "$(nproc)" "${ds[@]}"
plan "deepseek-v3 gb64 at the base" "$tmp/memplan-base" "$(nproc)" "${ds64[@]}"
plan "gpt-oss-120b at the base" "$tmp/memplan-base" "$(nproc)" "${oss[@]}"
rm -rf "$tmp"
