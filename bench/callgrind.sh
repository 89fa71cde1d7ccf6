#!/bin/bash
# callgrind.sh PACKAGE BENCH [N]: instructions per iteration of a Go
# benchmark, counted by valgrind's callgrind, which does not depend on the
# machine's load as wall or CPU time does (docs/performance.md). It runs
# the benchmark for 2 and N iterations (default 21) at GOMAXPROCS=1 and
# prints the difference over N − 2.
#
# Both counts are past 1 so that they cancel what runs once per count:
# with -benchtime Kx for K > 1, the testing package runs a benchmark
# function once with b.N = 1 and again with b.N = K, each after a
# runtime.GC (a b.Loop benchmark runs once, K iterations, after one), while
# for K = 1 it runs it once only. A difference from 1 iteration counted
# N + 1 iterations' worth and a collection over N − 1 (the twenty-eighth
# session, docs/performance.md). Run it at GOGC=off (and with
# GODEBUG=asyncpreemptoff=1: the preemption signal crashes callgrind now
# and then). Needs valgrind.
#
#   GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$'
set -euo pipefail
pkg=$1 bench=$2 n=${3:-21}
if ((n < 3)); then
	echo "callgrind.sh: N must be 3 or more" >&2
	exit 2
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/b.test" "$pkg"
count() {
	(cd "$pkg" && GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$1" \
		"$dir/b.test" -test.run X -test.bench "$bench" -test.benchtime "${1}x" 2>&1 |
		awk '/Collected/ {print $4}')
}
two=$(count 2)
many=$(count "$n")
echo "$bench: $(((many - two) / (n - 2))) instructions per iteration (callgrind, $n and 2 iterations)"
