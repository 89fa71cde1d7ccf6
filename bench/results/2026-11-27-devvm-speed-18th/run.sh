#!/usr/bin/env bash
# How many estimates tune's batch search takes (tuner.TestTuneTrials: every
# bundled spec and imported config on a100-40gb, h100-80gb and h200-141gb,
# each answer checked to fit with the batch above it not fitting), at the
# session's base (1c75a9f, the test file copied into a worktree of it) and
# at the working tree's HEAD.
# Usage: bash bench/results/2026-11-27-devvm-speed-18th/run.sh > out.txt
set -u
root=$(git rev-parse --show-toplevel)
base=1c75a9f
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" "$base" >/dev/null 2>&1
cp "$root/tuner/trials_test.go" "$w/base/tuner/"
for t in "$w/base" "$root"; do
	echo "== $(git -C "$t" rev-parse --short HEAD) $(date -u +%FT%TZ)"
	(cd "$t" && MEMPLAN_TUNE_TRIALS=1 go test ./tuner -run TestTuneTrials -v -count=1 | grep -v '^=== ' | sed 's/^ *trials_test.go:[0-9]*: //')
done
git -C "$root" worktree remove --force "$w/base"
rm -rf "$w"
