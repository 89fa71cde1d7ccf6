#!/bin/bash
# pools.sh [BASE]: how much of the replayed steps one pool's own convergence
# would let go (forty-first session, weighed and not built): pools.patch
# (beside this script, applied to BASE, default 2742b61, in a scratch
# worktree) compares each pool's layout (small, large) at every step's end
# with the step before's and counts, over the replayed steps, the events of
# a pool that had already come back to its state (those a replay could
# skip, keeping only their bytes for the peaks). Output: pools.txt.
set -euo pipefail
source "$(dirname "$0")/trial.sh"
trial "${1:-2742b61}" pools.patch
echo "== the 7B estimate (specs/mistral-7b.yaml)"
go test -count=1 ./estimate -run TestZZPool7B -v 2>&1 | grep ZZPOOL
echo "== one 50 x 12 report"
GOMAXPROCS=1 go test -count=1 ./report -run TestZZPool -v 2>&1 | grep ZZPOOL
