#!/usr/bin/env bash
# The first estimate of a process against a warm one (docs/performance.md,
# "Fortieth session"), one core, from the repository root:
#   bash bench/results/2026-11-28-devvm-speed-40th/cold.sh > bench/results/2026-11-28-devvm-speed-40th/cold.txt 2>&1
set -eu
date -u; go version; uptime; git log --oneline -1
GOMAXPROCS=1 go test -count=1 ./estimate -run X -bench 'Estimate(Cold)?$/^(gpt2|7b-32layer|llama-3-70b)$' -benchtime 20x | grep Bench
