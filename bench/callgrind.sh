#!/bin/bash
# callgrind.sh PACKAGE BENCH [N]: instructions per iteration of a Go
# benchmark, counted by valgrind's callgrind, which does not depend on the
# machine's load as wall or CPU time does (docs/performance.md). It runs
# the benchmark for 1 and N iterations (default 21) at GOMAXPROCS=1 and
# prints the difference over N − 1. Needs valgrind.
#
#   bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$'
set -euo pipefail
pkg=$1 bench=$2 n=${3:-21}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/b.test" "$pkg"
count() {
	(cd "$pkg" && GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$1" \
		"$dir/b.test" -test.run X -test.bench "$bench" -test.benchtime "${1}x" 2>&1 |
		awk '/Collected/ {print $4}')
}
one=$(count 1)
many=$(count "$n")
echo "$bench: $(((many - one) / (n - 1))) instructions per iteration (callgrind, $n and 1 iterations)"
