#!/usr/bin/env bash
# The twenty-first session's speed changes against BASE (default 4dae5c0,
# the twentieth session's last commit), interleaved, three rounds, on one
# core (GOMAXPROCS=1) of this 2-core VM: the 7B in-process estimate, nine
# mixed estimates (BenchmarkEstimateMix, added this session and appended to
# BASE's benchmarks for the comparison), the allocator replay of a 7B
# estimate, and the 50 x 12 report. Then instructions per round of the mix
# without the collector (GOGC=off; bench/callgrind.sh counts them), where
# wall and CPU time are too noisy to tell a few percent apart.
# Usage: bash bench/results/2026-11-27-devvm-speed-21st/run.sh [BASE] > out.txt
set -u
base=${1:-4dae5c0}
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" "$base" -q
# BenchmarkEstimateMix from HEAD, appended to BASE's benchmarks.
awk '/^\/\/ BenchmarkEstimateMix/{p=1} p' "$root/estimate/bench_test.go" >>"$w/base/estimate/bench_test.go"
for v in base head; do
	src=$root
	[[ $v == base ]] && src=$w/base
	(cd "$src" && go test -c -o "$w/est-$v" ./estimate && go test -c -o "$w/rep-$v" ./report)
done
echo "== base $(git -C "$root" rev-parse --short "$base") head $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2 3; do
	for v in base head; do
		# Each binary runs in its own checkout, with the specs and
		# configs its benchmarks list.
		src=$root
		[[ $v == base ]] && src=$w/base
		(cd "$src/estimate" && GOMAXPROCS=1 "$w/est-$v" -test.run X -test.bench '^BenchmarkEstimate$/7b|EstimateMix|AllocatorReplay/7b' -test.benchtime 200x -test.benchmem | grep Benchmark | sed "s/^/$v /")
		(cd "$src/report" && GOMAXPROCS=1 "$w/rep-$v" -test.run X -test.bench Report50x12 -test.benchtime 1x | grep Benchmark | sed "s/^/$v /")
	done
done
echo "== instructions per round of BenchmarkEstimateMix, GOGC=off (callgrind, 3 and 1 rounds)"
for v in base head; do
	src=$root
	[[ $v == base ]] && src=$w/base
	one=$(cd "$src/estimate" && GOGC=off GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg1" "$w/est-$v" -test.run X -test.bench EstimateMix -test.benchtime 1x 2>&1 | awk '/Collected/ {print $4}')
	many=$(cd "$src/estimate" && GOGC=off GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg3" "$w/est-$v" -test.run X -test.bench EstimateMix -test.benchtime 3x 2>&1 | awk '/Collected/ {print $4}')
	echo "$v $(((many - one) / 2))"
done
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
