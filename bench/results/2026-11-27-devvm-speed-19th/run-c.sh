#!/usr/bin/env bash
# The session's end figures at HEAD, GOMAXPROCS=1 unless said: the 70B
# plan's tops (planner's TestPlanTops, three rounds), tune's batch search
# over every spec and config on three devices (TestTuneTrials), the 50 x 12
# report's estimates and time, the 7B in-process estimate, and the
# Qwen3-30B-A3B plan's time and peak resident memory on two cores
# (GOMAXPROCS=2, /usr/bin/time -v).
# Usage: bash bench/results/2026-11-27-devvm-speed-19th/run-c.sh > out-c.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
(cd "$root" && go build -o "$w/memplan" ./cmd/memplan)
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root"
for round in 1 2 3; do
	GOMAXPROCS=1 MEMPLAN_PLAN_TOPS=1 go test ./planner -run TestPlanTops -v -count=1 | grep 'top '
done
MEMPLAN_TUNE_TRIALS=1 GOMAXPROCS=1 go test ./tuner -run TestTuneTrials -v -count=1 | grep searches
GOMAXPROCS=1 go test ./report -run X -bench Report50x12 -benchtime 2x | grep Benchmark
GOMAXPROCS=1 go test ./estimate -run X -bench '^BenchmarkEstimate$/7b' -benchtime 200x | grep Benchmark
GOMAXPROCS=2 /usr/bin/time -v "$w/memplan" plan --hf model/testdata/hf/qwen3-30b-a3b.json --seq 4096 \
	--device h100-80gb --global-batch 64 --max-gpus 16 2>&1 >/dev/null | grep -E 'Elapsed|Maximum resident'
rm -rf "$w"
