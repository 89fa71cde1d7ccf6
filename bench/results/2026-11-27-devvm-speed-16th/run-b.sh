#!/usr/bin/env bash
# The sixteenth session's simulator and report figures (docs/performance.md,
# "Sixteenth session"), on the 2-core development machine at GOMAXPROCS=1:
# the 7B estimate's and its allocator replay's instructions (callgrind, 11
# iterations, GOGC=off so that the collector does not blur them) at the
# session's base (abab119) and at HEAD, and at HEAD the report and plan
# benchmarks and the MoE plan of docs/moe.md §6.
# Usage: bash bench/results/2026-11-27-devvm-speed-16th/run-b.sh > out-b.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" abab119 >/dev/null 2>&1
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
for tree in "$w/base" "$root"; do
	(cd "$tree" && for b in '^BenchmarkEstimate$/^7b-32layer$' '^BenchmarkAllocatorReplay$/^7b-32layer$'; do
		echo "$(git rev-parse --short HEAD) $(GOGC=off bash bench/callgrind.sh ./estimate "$b" 11 | tail -1)"
	done)
done
git -C "$root" worktree remove --force "$w/base"
cd "$root"
(cd report && GOMAXPROCS=1 go test -run X -bench 'Report50x12$' -benchtime 1x . | grep Benchmark)
(cd planner && GOMAXPROCS=1 go test -run X -bench 'BenchmarkPlan70B/simulator' -benchtime 1x . | grep Benchmark)
go build -o "$w/memplan" ./cmd/memplan
t0=$(date +%s.%N)
GOMAXPROCS=1 "$w/memplan" plan --hf model/testdata/hf/qwen3-30b-a3b.json --seq 4096 --global-batch 64 --max-gpus 16 --device h100-80gb | sed -n 2p
echo "moe plan wall $(echo "$(date +%s.%N) - $t0" | bc) s"
rm -rf "$w"
echo "go $(go version | cut -d' ' -f3), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
