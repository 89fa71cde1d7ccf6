#!/usr/bin/env bash
# What the thirty-ninth session's change to tensor parallelism without sp
# (042f054, docs/parallelism.md §3.1.8) and its trial of a low address-space
# chunk at NCCL's set-up (lowchunk.patch, not kept; docs/allocator.md §8)
# do to every multi-GPU line the bench tests log, each set beside the
# commit before the change:
#   bash bench/results/2026-11-28-devvm-tp-wrap-39th/run.sh > bench/results/2026-11-28-devvm-tp-wrap-39th/out.txt 2>&1
set -eu
root=$(pwd)
log() { (cd "$1" && MEMPLAN_BENCH_LOG=1 go test -count=1 ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v 2>&1 |
  grep -o "run .*" | sort) >"$2"; }
w=$(mktemp -d)
for c in 042f054~1 042f054; do
  git worktree add --detach "$w/$c" "$c" >/dev/null 2>&1
  log "$w/$c" "$w/$c.txt"
done
(cd "$w/042f054~1" && git apply "$root/bench/results/2026-11-28-devvm-tp-wrap-39th/lowchunk.patch")
log "$w/042f054~1" "$w/lowchunk.txt"
date -u; go version
echo "== 042f054 (a wrap per projection) against its parent"
python3 bench/torch/dist/benchlog_diff.py "$w/042f054~1.txt" "$w/042f054.txt"
echo "== the low chunk (lowchunk.patch on the parent) against the parent"
python3 bench/torch/dist/benchlog_diff.py "$w/042f054~1.txt" "$w/lowchunk.txt"
for c in 042f054~1 042f054; do git worktree remove --force "$w/$c"; done
