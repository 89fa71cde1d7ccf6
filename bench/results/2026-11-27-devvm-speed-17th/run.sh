#!/usr/bin/env bash
# The Qwen3-30B-A3B plan of docs/moe.md §6 at the session's base (4077bdb),
# after tensor parallelism of a mixture of experts (a5aac21), after EP beside
# TP (61b8324), after the bound counts a MoE's blocks (45f48b9) and after the
# throughput proxy counts its all-to-alls and active parameters (1a700c5), on the
# development machine at GOMAXPROCS=1: the counts line, the first layout
# and the wall time at each commit; and the 70B amp-bf16 and bf16 plans at
# the base, after the proxy change (1a700c5, unchanged) and at d15b2c8
# (tensor-parallel models built on the meta device by default).
# Usage: bash bench/results/2026-11-27-devvm-speed-17th/run.sh > out.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
for rev in 4077bdb a5aac21 61b8324 45f48b9 1a700c5; do
	git -C "$root" worktree add --detach "$w/t" "$rev" >/dev/null 2>&1
	(cd "$w/t" && go build -o "$w/memplan-$rev" ./cmd/memplan)
	git -C "$root" worktree remove --force "$w/t"
	t0=$(date +%s.%N)
	(cd "$root" && GOMAXPROCS=1 "$w/memplan-$rev" plan --hf model/testdata/hf/qwen3-30b-a3b.json --seq 4096 \
		--global-batch 64 --max-gpus 16 --device h100-80gb | sed -n '2p;5p')
	echo "$rev qwen3-30b-a3b wall $(echo "$(date +%s.%N) - $t0" | bc) s"
done
git -C "$root" worktree add --detach "$w/t" d15b2c8 >/dev/null 2>&1
(cd "$w/t" && go build -o "$w/memplan-d15b2c8" ./cmd/memplan)
git -C "$root" worktree remove --force "$w/t"
for rev in 4077bdb 1a700c5 d15b2c8; do
	for prec in amp-bf16 bf16; do
		t0=$(date +%s.%N)
		(cd "$root" && GOMAXPROCS=1 "$w/memplan-$rev" plan specs/llama-3-70b.yaml --global-batch 1024 --max-gpus 1024 \
			--precision $prec --device h100-80gb | sed -n '2p;5p')
		echo "$rev llama-3-70b $prec wall $(echo "$(date +%s.%N) - $t0" | bc) s"
	done
done
t0=$(date +%s.%N)
(cd "$root" && GOMAXPROCS=1 "$w/memplan-d15b2c8" plan --hf model/testdata/hf/qwen3-30b-a3b.json --seq 4096 \
	--global-batch 64 --max-gpus 16 --device h100-80gb | sed -n '2p;5p')
echo "d15b2c8 qwen3-30b-a3b wall $(echo "$(date +%s.%N) - $t0" | bc) s"
git -C "$root" worktree prune
rm -rf "$w"
