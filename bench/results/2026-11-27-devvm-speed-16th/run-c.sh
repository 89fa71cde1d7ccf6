#!/usr/bin/env bash
# The report benchmark's instructions (callgrind, one iteration, GOGC=off)
# at the session's base (abab119) and at HEAD: its wall and CPU times on
# the development machine vary by more than the change (docs/performance.md,
# "Sixteenth session"). About four minutes each.
# Usage: bash bench/results/2026-11-27-devvm-speed-16th/run-c.sh > out-c.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" abab119 >/dev/null 2>&1
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
for tree in "$w/base" "$root"; do
	(cd "$tree" && go test -c -o "$w/report.test" ./report && cd report &&
		GOGC=off GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$w/cg" "$w/report.test" \
			-test.run X -test.bench 'Report50x12$' -test.benchtime 1x 2>&1 |
		awk -v c="$(git rev-parse --short HEAD)" '/Collected/ {print c, "BenchmarkReport50x12:", $4, "instructions (callgrind, one iteration)"} /^Benchmark/ {print c, $0}')
done
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
