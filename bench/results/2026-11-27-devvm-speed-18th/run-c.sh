#!/usr/bin/env bash
# BenchmarkReport50x12 at GOMAXPROCS=1, the session's base (1c75a9f, in a
# worktree) and HEAD alternately, three rounds (the report's estimates per
# run and CPU seconds; the machine's load varies, so compare within a round).
# Usage: bash bench/results/2026-11-27-devvm-speed-18th/run-c.sh > out-c.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" 1c75a9f >/dev/null 2>&1
for round in 1 2 3; do
	for t in "$w/base" "$root"; do
		echo "== round $round $(git -C "$t" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
		(cd "$t" && GOMAXPROCS=1 go test ./report -run X -bench Report50x12 -benchtime 2x | grep Benchmark)
	done
done
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
