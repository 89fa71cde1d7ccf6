#!/usr/bin/env bash
# Twenty-third session: the 7B in-process estimates at the session's base
# (7caa8c9, checked out in a worktree at $BASE) and at HEAD, interleaved,
# three rounds, one core. Run from the repository root.
set -eu
base=${BASE:-/tmp/base}
for i in 1 2 3; do
  for d in "$base" .; do
    (cd "$d" && GOMAXPROCS=1 go test ./estimate -run X -bench 'Estimate/7b-32layer' -benchtime 200x -count 1 |
      grep Benchmark | awk -v d="$d" '{print d, $1, $3, $4}')
  done
done
uptime
# The new families' cost: one DeepSeek-V3 estimate (671B, 61 layers) and
# its plan (refused layouts and bounds), wall time of the whole commands,
# least of three, on a binary built here.
go build -o /tmp/memplan-23rd ./cmd/memplan
for cmd in "estimate --hf model/testdata/hf/deepseek-v3.json --seq 4096 --batch 1 --dp 512 --zero 3 --checkpointing every-block --device h200-141gb" \
           "plan --hf model/testdata/hf/deepseek-v3.json --seq 4096 --global-batch 64 --device h200-141gb"; do
  best=
  for i in 1 2 3; do
    t0=$(date +%s%N); GOMAXPROCS=1 /tmp/memplan-23rd $cmd >/dev/null 2>&1 || true; t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 )); [ -z "$best" ] || [ "$ms" -lt "$best" ] && best=$ms
  done
  echo "memplan $cmd: ${best} ms (GOMAXPROCS=1, least of 3)"
done
