#!/usr/bin/env bash
# The sixteenth session's planner figures (docs/planner.md, docs/performance.md,
# "Sixteenth session"), on the 2-core development machine at GOMAXPROCS=1:
# `memplan plan` for the 70B requests of docs/planner.md §4 (amp-bf16 and
# bf16) and the 8B request of its opening, with the cap on a pipeline's
# micro-batches at 32 (the old default), 64 (the new) and 128: wall time,
# the counts line and the first three layouts.
# Usage: bash bench/results/2026-11-27-devvm-speed-16th/run.sh > out.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
(cd "$root" && go build -o "$w/memplan" ./cmd/memplan) || exit 1
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root"
plan() {
	local cap=$1
	shift
	echo "-- memplan plan $* --max-microbatches $cap"
	local t0 t1
	t0=$(date +%s.%N)
	GOMAXPROCS=1 "$w/memplan" plan "$@" --max-microbatches "$cap" >"$w/out" 2>&1
	t1=$(date +%s.%N)
	echo "wall $(echo "$t1 - $t0" | bc) s"
	sed -n '2p;4,7p' "$w/out"
}
for cap in 32 64 128; do
	plan "$cap" specs/llama-3-70b.yaml --device h100-80gb --global-batch 1024 --max-gpus 1024
	plan "$cap" specs/llama-3-70b.yaml --device h100-80gb --global-batch 1024 --max-gpus 1024 --precision bf16
	plan "$cap" specs/llama-3-8b.yaml --global-batch 512 --max-gpus 64
done
rm -rf "$w"
echo "go $(go version | cut -d' ' -f3), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
