#!/usr/bin/env bash
# The twenty-eighth session's speed changes against BASE (default f9fbd3b,
# main when the session started) on this 2-core VM, one core each
# (GOMAXPROCS=1):
#   1. instructions counted by callgrind without the collector (GOGC=off;
#      GODEBUG=asyncpreemptoff=1, since the preemption signal crashes
#      callgrind now and then), per iteration as the difference of two
#      counts over the iterations between them (bench/callgrind.sh: both
#      counts run the benchmark function as often, so what runs once per
#      count cancels): the 7B in-process estimate (13 and 3 iterations),
#      the allocator replay of its mallocs and frees (13 and 3), nine mixed
#      estimates (BenchmarkEstimateMix, 5 and 2) and the 50 x 12 report
#      (a b.Loop benchmark: 2 and 1);
#   2. CPU time, BASE and HEAD alternately, three rounds: the 7B estimate
#      (300 estimates a round) and the 50 x 12 report (one a round);
#   3. BenchmarkMallocFree (a malloc and a free with 10, 1,000 and 100,000
#      blocks of random sizes cached), BASE and HEAD alternately.
# Usage: bash bench/results/2026-11-27-devvm-speed-28th/run.sh [BASE] > out.txt
set -u
base=${1:-f9fbd3b}
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" "$base" -q
for v in base head; do
	src=$root
	[[ $v == base ]] && src=$w/base
	(cd "$src" && go test -c -o "$w/est-$v" ./estimate && go test -c -o "$w/rep-$v" ./report &&
		go test -c -o "$w/alloc-$v" ./alloc)
done
srcof() { if [[ $1 == base ]]; then echo "$w/base"; else echo "$root"; fi; }
# count BIN DIR BENCH N1 N2: instructions of N2 iterations less N1's, over
# N2 - N1.
count() {
	local bin=$1 dir=$2 bench=$3 n1=$4 n2=$5 a b
	a=$(cd "$dir" && GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg" \
		"$bin" -test.run X -test.bench "$bench" -test.benchtime "${n1}x" 2>&1 | awk '/Collected/ {print $4}')
	b=$(cd "$dir" && GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg" \
		"$bin" -test.run X -test.bench "$bench" -test.benchtime "${n2}x" 2>&1 | awk '/Collected/ {print $4}')
	echo $(((b - a) / (n2 - n1)))
}
echo "== base $(git -C "$root" rev-parse --short "$base") head $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== instructions per iteration (callgrind, GOGC=off)"
for b in "^BenchmarkEstimate\$/^7b-32layer\$ 3 13" "AllocatorReplay/^7b 3 13" "EstimateMix 2 5"; do
	set -- $b
	for v in base head; do
		echo "$v $1 $(count "$w/est-$v" "$(srcof $v)/estimate" "$1" "$2" "$3")"
	done
done
for v in base head; do
	echo "$v Report50x12 $(count "$w/rep-$v" "$(srcof $v)/report" Report50x12 1 2)"
done
echo "== CPU time, alternately $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2 3; do
	for v in base head; do
		(cd "$(srcof $v)/estimate" && GOMAXPROCS=1 "$w/est-$v" -test.run X -test.bench '^BenchmarkEstimate$/7b' -test.benchtime 300x | grep Benchmark | sed "s/^/$v /")
		(cd "$(srcof $v)/report" && GOMAXPROCS=1 "$w/rep-$v" -test.run X -test.bench Report50x12 -test.benchtime 1x | grep Benchmark | sed "s/^/$v /")
	done
done
echo "== BenchmarkMallocFree $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2; do
	for v in base head; do
		(cd "$(srcof $v)/alloc" && GOMAXPROCS=1 "$w/alloc-$v" -test.run X -test.bench MallocFree -test.benchtime 200000x | grep Benchmark | sed "s/^/$v /")
	done
done
echo "== done $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
