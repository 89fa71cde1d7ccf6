#!/usr/bin/env bash
# The Qwen3-30B-A3B plan of docs/moe.md §6 before and after the bound's
# FSDP state stopped dividing by ep (docs/planner.md §4), on the
# development machine at GOMAXPROCS=1: the counts line, the first layout
# and the wall time at each commit.
# Usage: bash bench/results/2026-11-27-devvm-speed-16th/run-d.sh > out-d.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
for rev in d8a3d13 aa97bbd; do
	git -C "$root" worktree add --detach "$w/t" "$rev" >/dev/null 2>&1
	(cd "$w/t" && go build -o "$w/memplan" ./cmd/memplan)
	git -C "$root" worktree remove --force "$w/t"
	t0=$(date +%s.%N)
	(cd "$root" && GOMAXPROCS=1 "$w/memplan" plan --hf model/testdata/hf/qwen3-30b-a3b.json --seq 4096 \
		--global-batch 64 --max-gpus 16 --device h100-80gb | sed -n '2p;5p')
	echo "$rev wall $(echo "$(date +%s.%N) - $t0" | bc) s"
done
rm -rf "$w"
