#!/bin/bash
# Twelfth session's CPU figures on the development machine (2 shared cores,
# Go 1.26.8): whole commands (least of 7 runs at GOMAXPROCS=1), the
# planner's dearest pipeline estimate, the 70B plan at two GOGC settings
# with its garbage collections counted, and each estimate of that plan
# timed. Run from the repository root: bash bench/results/2026-11-26-devvm-speed-12th/run.sh
set -eu
go build -o /tmp/memplan-12th ./cmd/memplan
date -u; uptime; go version; git rev-parse --short HEAD
python3 - <<'PY'
import os, subprocess, time
env = dict(os.environ, GOMAXPROCS="1")
def best(args, n=7):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); subprocess.run(args, capture_output=True, env=env); ts.append(time.perf_counter() - t0)
    return min(ts) * 1000
m = "/tmp/memplan-12th"
print("--help %.1f ms" % best([m, "--help"]))
for spec in ["specs/gpt2-124m.yaml", "specs/mistral-7b.yaml", "specs/gpt2-xl.yaml"]:
    print("%s: estimate %.1f ms, tune %.1f ms" % (spec, best([m, "estimate", spec]), best([m, "tune", spec])))
PY
GOMAXPROCS=1 go test ./estimate -run X -bench 'BenchmarkEstimate$/70b-pp8-acc32' -benchtime 3x | grep Benchmark
for g in "" 100; do
  GOGC=$g GODEBUG=gctrace=1 GOMAXPROCS=1 /usr/bin/time -f "plan 70B amp-bf16 (GOGC=${g:-default}): %e s, %M KB" \
    /tmp/memplan-12th plan specs/llama-3-70b.yaml --device h100-80gb --global-batch 1024 --max-gpus 1024 2>/tmp/gc.txt >/dev/null || true
  echo "$(grep -c '^gc ' /tmp/gc.txt) collections; $(grep '^plan' /tmp/gc.txt)"
done
MEMPLAN_PLAN_TIMES=1 GOMAXPROCS=1 go test ./planner -run TestPlanEstimateTimes -count=1 -v | grep -E 'plan |ms  ' | sed 's/^ *times_test.go:[0-9]*: //' | head -26
