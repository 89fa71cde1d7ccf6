#!/usr/bin/env bash
# The Llama-3-70B amp-bf16 plan of BenchmarkPlan70B (global batch 1024, up
# to 1024 GPUs, no safety margin) for the first layout, the first three and
# the ten that memplan plan lists, at GOMAXPROCS=1 (planner's TestPlanTops),
# three rounds.
# Usage: bash bench/results/2026-11-27-devvm-speed-18th/run-d.sh > out-d.txt
set -u
root=$(git rev-parse --show-toplevel)
for round in 1 2 3; do
	echo "== round $round $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
	(cd "$root" && GOMAXPROCS=1 MEMPLAN_PLAN_TOPS=1 go test ./planner -run TestPlanTops -v -count=1 | grep 'top ')
done
