#!/usr/bin/env bash
# The fortieth session's speed trials, not kept (docs/performance.md,
# "Fortieth session"), each a patch beside this script applied to a
# worktree of the tree it runs in, measured against that tree:
#   bash bench/results/2026-11-28-devvm-speed-40th/trials/run.sh > bench/results/2026-11-28-devvm-speed-40th/trials/out.txt 2>&1
# from the repository root, on the development machine (2 shared cores).
# Needs valgrind and perf. Last, the share of the collector in Llama-3-70B's
# estimate command at the session's base (d544ac5), the figure that led to
# tuneGC.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
date -u; go version; uptime; git log --oneline -1
tree() { # tree PATCH: a worktree of HEAD with PATCH applied (none: as it is)
  local w; w=$(mktemp -d)
  git worktree add --detach "$w" HEAD >/dev/null 2>&1
  if [[ $1 != none ]]; then (cd "$w" && git apply "$here/$1.patch"); fi
  echo "$w"
}
gone() { git worktree remove --force "$1"; }
base=$(tree none)

echo "== slope.patch: the batch search from the spec's batch with a slope read off its estimate"
w=$(tree slope); (cd "$w" && go test -count=1 ./report -run TestTrialSlope -v | grep -v "^=== \|^--- \|^PASS\|^ok"); gone "$w"

echo "== replay-meet.patch: replayed steps whose allocator layout meets the recorded step's (every 64th event)"
w=$(tree replay-meet); (cd "$w" && GOMAXPROCS=1 go test -count=1 ./report -run TestTrialReplay -v | grep replayed); gone "$w"

echo "== instructions of BenchmarkEstimateMix (callgrind, GOGC=off): the tree, then each allocator trial"
(cd "$base" && GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimateMix$' 5 | tail -1 | sed 's/^/tree /')
for p in branchless-search push-place four-ary-heap; do
  w=$(tree $p); (cd "$w" && GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimateMix$' 5 | tail -1 | sed "s/^/$p /"); gone "$w"
done

echo "== CPU time, alternately (GOMAXPROCS=1): BenchmarkEstimateMix (cpu-ms/op) and the 50 x 12 report (cpu-s/op)"
(cd "$base" && go test -c -o /tmp/trial-est-tree.test ./estimate && go test -c -o /tmp/trial-rep-tree.test ./report)
for p in branchless-search four-ary-heap row-lowering; do
  w=$(tree $p); (cd "$w" && go test -c -o /tmp/trial-est-$p.test ./estimate && go test -c -o /tmp/trial-rep-$p.test ./report); gone "$w"
done
for i in 1 2 3; do
  for t in tree four-ary-heap; do
    (cd estimate && GOMAXPROCS=1 /tmp/trial-est-$t.test -test.run X -test.bench EstimateMix -test.benchtime 40x | awk -v t=$t '/^Bench/ {print "mix", t, $5}')
  done
  for t in tree branchless-search row-lowering; do
    (cd report && GOMAXPROCS=1 /tmp/trial-rep-$t.test -test.run X -test.bench Report50x12 -test.benchtime 2x | awk -v t=$t '/^Bench/ {print "report", t, $5}')
  done
done
gone "$base"

echo "== the collector's share of Llama-3-70B's estimate command at d544ac5 (perf, thirty runs, one core)"
w=$(mktemp -d); git worktree add --detach "$w" d544ac5 >/dev/null 2>&1
(cd "$w" && go build -o /tmp/trial-memplan-d544ac5 ./cmd/memplan); gone "$w"
perf record -q -e task-clock -F 10000 -o /tmp/trial-perf.data -- bash -c \
  "for i in \$(seq 30); do GOMAXPROCS=1 /tmp/trial-memplan-d544ac5 estimate $root/specs/llama-3-70b.yaml >/dev/null; done" 2>/dev/null
perf report -i /tmp/trial-perf.data --comm trial-memplan-d --no-children --sort sym -g none 2>/dev/null |
  awk '$1 ~ /%$/ {p=$1; sub("%","",p); all+=p; if ($3 ~ /scanObject|findObject|wbBufFlush|bulkBarrierPreWrite|tryDeferToSpanScan|gcWriteBarrier|greyobject|typePointers|scanblock|gcDrain/) gc+=p}
       END {printf "collector (mark, write barriers): %.1f%% of the samples (%.1f%% listed)\n", gc, all}'
