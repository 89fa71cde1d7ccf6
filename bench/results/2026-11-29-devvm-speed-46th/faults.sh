#!/usr/bin/env bash
# Forty-sixth session: where a fresh process's page faults are, for one Llama-3-8B estimate command on one core, in
# the tree before the buffers were sized once (BASE) and in this tree: every fault sampled (perf record -e
# page-faults -c 1 -g), the share under runtime.memmove and runtime.memclrNoHeapPointers (buffers copied or cleared
# as they grow) and under the estimate, from the repository root:
#   BASE=/tmp/b46c bash bench/results/2026-11-29-devvm-speed-46th/faults.sh > bench/results/2026-11-29-devvm-speed-46th/faults.txt 2>&1
set -u
base=${BASE:?set BASE to a worktree of the base}
date -u; uptime
(cd "$base" && go build -o /tmp/mp-faults-before ./cmd/memplan)
go build -o /tmp/mp-faults-after ./cmd/memplan
for w in before after; do
  GOMAXPROCS=1 perf record -q -g -e page-faults -c 1 -o /tmp/faults-$w.data /tmp/mp-faults-$w estimate specs/llama-3-8b.yaml >/dev/null 2>&1
  echo "== $w: $(perf report -i /tmp/faults-$w.data --stdio 2>/dev/null | grep -m1 -o 'of event.*' ) "
  perf report -i /tmp/faults-$w.data --children --stdio --sort sym -g none 2>/dev/null |
    grep -E "\] (runtime\.memmove|runtime\.memclrNoHeapPointers|github.com/memplan/memplan/estimate\.simulateRank|runtime\.doInit1)$"
done
