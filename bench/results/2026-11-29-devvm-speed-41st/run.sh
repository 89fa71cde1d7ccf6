#!/bin/bash
# run.sh [BASE]: the forty-first session's trial of a training step that
# repeats the last one without being replayed (repeat.patch beside this
# script, applied to BASE, default 20c27de, in a scratch worktree;
# docs/performance.md, "Forty-first session"). The patch checks, after
# every step that ends in a state the step before did not, whether the
# next step would take every block this one took (alloc's Takes over the
# step's recorded choices) and, where so, books it without replaying it.
# It prints one DBG line per check: "end true" where the check passed,
# "takes at K FSIZE FORDER CSIZE CORDER COFF N" where the K-th malloc
# would have taken the fresh segment (FSIZE, FORDER) instead of the block
# it took (CSIZE, CORDER, COFF), "fresh"/"before differs" where the state
# is not the last one's plus whole free segments. Output: out.txt.
set -euo pipefail
source "$(dirname "$0")/trial.sh"
trial "${1:-20c27de}" repeat.patch
echo "== every estimate of TestReplayExact equal to simulating every step"
go test -count=1 ./estimate -run 'TestReplayExact$' 2>&1 | tail -1
echo "== the checks of one 50 x 12 report (first words of each DBG line)"
GOMAXPROCS=1 go test -count=1 ./report -run X -bench BenchmarkReport50x12 -benchtime 1x 2>&1 | grep DBG >"$scratch/report.txt" || true
awk '{print $1, $2, $3}' "$scratch/report.txt" | sort | uniq -c
echo "== the failed checks: the fresh segment's size against the block taken, and the block's offset"
grep "DBG takes" "$scratch/report.txt" | awk '{print ($5 == $7 ? "equal-size" : "other-size"), ($9 == 0 ? "offset-0" : "offset>0")}' | sort | uniq -c
echo "== the 7B estimate (BenchmarkEstimate/7b-32layer), one estimate"
go test -count=1 ./estimate -run X -bench 'BenchmarkEstimate$/7b' -benchtime 1x 2>&1 | grep DBG | sort | uniq -c
echo
echo "== repeat-swap.patch (in place of repeat.patch): the same check where the second step may also take"
echo "== a fresh whole segment in place of an equal whole segment the first step took, the two then"
echo "== exchanging names (alloc.Repeat); an upper bound: its test of the segments placed between the two"
echo "== is left out (adjacency disabled, 'e != i-1' replaced), so a pass here is not yet a proof"
git checkout -q -- . && git clean -qfd
git apply "$here/repeat-swap.patch"
GOMAXPROCS=1 go test -count=1 ./report -run X -bench BenchmarkReport50x12 -benchtime 1x 2>&1 | grep "DBG " | awk '{print $1, $2, $3}' | sort | uniq -c
go test -count=1 ./estimate -run X -bench 'BenchmarkEstimate$/7b' -benchtime 1x 2>&1 | grep "DBG " | sort | uniq -c
