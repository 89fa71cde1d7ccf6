#!/usr/bin/env bash
# Forty-sixth session: the 50 x 12 report on one core at GOGC 400 (as `memplan report` runs), the tree before the
# sized buffers (BASE) and this tree alternately, two rounds, from the repository root:
#   BASE=/tmp/b46c bash bench/results/2026-11-29-devvm-speed-46th/report.sh > bench/results/2026-11-29-devvm-speed-46th/report.txt 2>&1
set -u
base=${BASE:?set BASE to a worktree of the base}
date -u; uptime
for tree in "$base" "$PWD" "$base" "$PWD"; do
  (cd "$tree" && GOGC=400 GOMAXPROCS=1 go test ./report -run X -bench Report50x12 -benchtime 2x -pgo=cmd/memplan/default.pgo 2>&1 |
    grep Benchmark | sed "s|^|$(git -C "$tree" rev-parse --short HEAD) |")
done
