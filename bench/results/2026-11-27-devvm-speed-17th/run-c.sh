#!/usr/bin/env bash
# BenchmarkPlan70B (the amp-bf16 plan, with the real estimator) before and
# after the interleaved order's slices and the bound's cache of orders
# (8ca5c08 → the commit after it), alternating, three rounds of three plans,
# at GOMAXPROCS=1 on the development machine.
# Usage: bash bench/results/2026-11-27-devvm-speed-17th/run-c.sh REV > out-c.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
echo "== $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
for rev in 8ca5c08 "$1"; do
	git -C "$root" worktree add --detach "$w/t" "$rev" >/dev/null 2>&1
	(cd "$w/t" && go test -c -o "$w/planner-$rev.test" ./planner)
	git -C "$root" worktree remove --force "$w/t"
done
for i in 1 2 3; do
	for rev in 8ca5c08 "$1"; do
		echo "== $rev round $i"
		(cd "$root/planner" && GOMAXPROCS=1 "$w/planner-$rev.test" -test.run X -test.bench 'Plan70B/simulator-amp' -test.benchtime 3x | grep Benchmark)
	done
done
git -C "$root" worktree prune
rm -rf "$w"
