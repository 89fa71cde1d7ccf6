#!/usr/bin/env bash
# The twentieth session's changes against the speed figures: the 7B
# in-process estimate and the 50 x 12 report on one core (GOMAXPROCS=1),
# BASE (default b2e3698, the nineteenth session's last commit) and HEAD
# interleaved, three rounds, on this 2-core VM (its timings are noisy: compare
# rounds, not single figures).
# Usage: bash bench/results/2026-11-27-devvm-speed-20th/run.sh [BASE] > out.txt
set -u
base=${1:-b2e3698}
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" "$base" -q
for v in base head; do
	src=$root
	[[ $v == base ]] && src=$w/base
	(cd "$src" && go test -c -o "$w/est-$v" ./estimate && go test -c -o "$w/rep-$v" ./report)
done
echo "== base $(git -C "$root" rev-parse --short "$base") head $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ)"
for round in 1 2 3; do
	for v in base head; do
		(cd "$root/estimate" && GOMAXPROCS=1 "$w/est-$v" -test.run X -test.bench '^BenchmarkEstimate$/7b' -test.benchtime 300x | grep Benchmark | sed "s/^/$v /")
		(cd "$root/report" && GOMAXPROCS=1 "$w/rep-$v" -test.run X -test.bench Report50x12 -test.benchtime 2x | grep Benchmark | sed "s/^/$v /")
	done
done
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
