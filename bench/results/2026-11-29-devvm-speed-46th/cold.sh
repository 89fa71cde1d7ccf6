#!/usr/bin/env bash
# Forty-sixth session, dev VM: where a cold estimate command goes (docs/performance.md, "Forty-sixth session"), from
# the repository root; output cold.txt beside this script:
#   bash bench/results/2026-11-29-devvm-speed-46th/cold.sh > bench/results/2026-11-29-devvm-speed-46th/cold.txt 2>&1
# 1. the estimate command over the bundled specs (the forty-third session's cmd-times.sh);
# 2. a fresh process's first estimate, the advice and a warm estimate (tuner's TestAdviceCostDebug), three runs;
# 3. perf stat and the kernel's share of sixty Llama-3-8B estimate commands on one core (perf record).
set -u
date -u; uptime; go version
bash bench/results/2026-11-29-devvm-speed-43rd/cmd-times.sh 2>&1 | tail -8
go test -c -o /tmp/tuner-cold.test ./tuner
for i in 1 2 3; do
  (cd tuner && GOMAXPROCS=1 MEMPLAN_ADVICE_COST=../specs/llama-3-8b.yaml /tmp/tuner-cold.test -test.run TestAdviceCostDebug -test.v 2>&1 | grep first)
done
go build -o /tmp/mp-cold ./cmd/memplan
GOMAXPROCS=1 perf stat -r 20 -e page-faults,task-clock /tmp/mp-cold estimate specs/llama-3-8b.yaml 2>&1 >/dev/null | grep -E "page-faults|task-clock|elapsed"
GOMAXPROCS=1 perf stat -r 20 -e page-faults,task-clock /tmp/mp-cold --version 2>&1 >/dev/null | grep -E "page-faults|task-clock|elapsed"
GOMAXPROCS=1 perf record -q -F 25000 -g -o /tmp/perf-cold.data -- sh -c 'for i in $(seq 60); do /tmp/mp-cold estimate specs/llama-3-8b.yaml >/dev/null; done' 2>/dev/null
echo "share of samples (children): page faults, prefault's madvise, the estimate, the advice"
perf report -i /tmp/perf-cold.data --children --sort sym -g none 2>/dev/null |
  grep -E "\] (asm_exc_page_fault|github.com/memplan/memplan/internal/prefault.Range|github.com/memplan/memplan/estimate.simulateRank|github.com/memplan/memplan/tuner.AdviseAllocConfStop|main.main)$"
