#!/usr/bin/env bash
# The Llama-3-70B amp-bf16 plan of BenchmarkPlan70B (global batch 1024, up
# to 1024 GPUs, no safety margin) for the first layout, the first three and
# the ten that memplan plan lists (planner's TestPlanTops), at a base
# commit and at HEAD alternately, three rounds, GOMAXPROCS=1.
# Usage: bash bench/results/2026-11-27-devvm-speed-19th/run-b.sh BASE > out-b.txt
set -u
base=$1
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add -q --detach "$w/base" "$base"
for round in 1 2 3; do
	for tree in "$w/base" "$root"; do
		echo "== round $round $(git -C "$tree" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
		(cd "$tree" && GOMAXPROCS=1 MEMPLAN_PLAN_TOPS=1 go test ./planner -run TestPlanTops -v -count=1 | grep 'top ')
	done
done
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
