#!/usr/bin/env bash
# The twenty-first session's allocator experiment and measuring trap, on one
# core of this 2-core VM: 4dae5c0 (the session's base), db26729 (empty
# buckets kept in the allocator's index) and 06edcf6 (that reverted, its
# small parts kept). Instructions per 7B allocator replay without the
# collector (callgrind, 11 and 1 replays); the 50 x 12 report's CPU time,
# the three alternately, two rounds; HEAD's report at GOGC=100 and 400; and
# instructions per round of BenchmarkEstimateMix at GOGC=100 and off for the
# base and HEAD, where callgrind inflates the collector's share.
# Usage: bash bench/results/2026-11-27-devvm-speed-21st/run-b.sh > out-b.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
for c in 4dae5c0 db26729 06edcf6 HEAD; do
	git -C "$root" worktree add --detach "$w/$c" "$c" -q
	if ! grep -q 'func BenchmarkEstimateMix' "$w/$c/estimate/bench_test.go"; then
		awk '/^\/\/ BenchmarkEstimateMix/{p=1} p' "$root/estimate/bench_test.go" >>"$w/$c/estimate/bench_test.go"
	fi
	(cd "$w/$c" && go test -c -o "$w/est-$c" ./estimate && go test -c -o "$w/rep-$c" ./report)
done
echo "== $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
# Each binary runs in its own checkout, which holds the specs and configs
# its benchmarks list.
count() { # BINARY BENCH N GOGC DIR: instructions per iteration
	local one many
	one=$(cd "$5/estimate" && GOGC=$4 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg" "$1" -test.run X -test.bench "$2" -test.benchtime 1x 2>&1 | awk '/Collected/ {print $4}')
	many=$(cd "$5/estimate" && GOGC=$4 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg" "$1" -test.run X -test.bench "$2" -test.benchtime "${3}x" 2>&1 | awk '/Collected/ {print $4}')
	echo $(((many - one) / ($3 - 1)))
}
echo "== instructions per 7B allocator replay, GOGC=off"
for c in 4dae5c0 db26729 06edcf6; do
	echo "$c $(count "$w/est-$c" 'AllocatorReplay/7b' 11 off "$w/$c")"
done
echo "== BenchmarkReport50x12, GOMAXPROCS=1, cpu-s"
for round in 1 2; do
	for c in 4dae5c0 db26729 06edcf6; do
		(cd "$w/$c/report" && GOMAXPROCS=1 "$w/rep-$c" -test.run X -test.bench Report50x12 -test.benchtime 1x | grep Benchmark | sed "s/^/$c /")
	done
done
echo "== HEAD's BenchmarkReport50x12 at GOGC=100 and 400"
for round in 1 2; do
	for g in 100 400; do
		(cd "$w/HEAD/report" && GOGC=$g GOMAXPROCS=1 "$w/rep-HEAD" -test.run X -test.bench Report50x12 -test.benchtime 1x | grep Benchmark | sed "s/^/GOGC=$g /")
	done
done
echo "== instructions per round of BenchmarkEstimateMix (3 and 1 rounds)"
for c in 4dae5c0 HEAD; do
	for g in 100 off; do
		echo "$c GOGC=$g $(count "$w/est-$c" EstimateMix 3 $g "$w/$c")"
	done
done
for c in 4dae5c0 db26729 06edcf6 HEAD; do git -C "$root" worktree remove --force "$w/$c"; done
rm -rf "$w"
