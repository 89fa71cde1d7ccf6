#!/usr/bin/env bash
# What the Qwen3-30B-A3B plan estimates at the session's end, by number of
# GPUs and kind of layout, with each kind's time (planner's
# TestPlanEstimateKinds), on the development machine at GOMAXPROCS=1.
# Usage: bash bench/results/2026-11-27-devvm-speed-17th/run-d.sh > out-d.txt
# (out-d.txt at ff4dad6; out-d-b.txt at 72be8b5, after EP × CP without FSDP
# is screened as not simulated)
set -u
root=$(git rev-parse --show-toplevel)
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root" && GOMAXPROCS=1 MEMPLAN_PLAN_KINDS=1 go test ./planner -run TestPlanEstimateKinds -v -count=1 | grep -v '^=== '
