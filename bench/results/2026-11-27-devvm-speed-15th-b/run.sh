#!/usr/bin/env bash
# The fifteenth session's figures that its first recording
# (../2026-11-26-devvm-speed-15th) did not hold (docs/performance.md and
# docs/tuner.md, "Fifteenth session"), on the 2-core development machine at
# GOMAXPROCS=1: `memplan tune` on two specs where batch 1 does not fit, at
# the session's base and at HEAD (least wall time of 7 runs each); the
# allocator advice's re-estimates whole and stopped (BenchmarkAdviseAllocConf);
# the 70B amp-bf16 plan's estimates by outcome (TestPlanEstimateTimes) and
# the plan and report benchmarks, at HEAD.
# Usage: bash bench/results/2026-11-27-devvm-speed-15th-b/run.sh > out.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
git -C "$root" worktree add --detach "$w/base" 6186567 >/dev/null 2>&1
(cd "$w/base" && go build -o "$w/memplan.base" ./cmd/memplan) || exit 1
(cd "$root" && go build -o "$w/memplan.head" ./cmd/memplan) || exit 1
git -C "$root" worktree remove --force "$w/base"
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root"
GOMAXPROCS=1 python3 - "$w" <<'PY'
import subprocess, sys, time
w = sys.argv[1]
for args in (["specs/llama-3-70b.yaml", "--device", "h100-80gb"],
             ["--hf", "model/testdata/hf/qwen3-30b-a3b.json", "--seq", "4096", "--device", "h100-80gb"]):
    out = []
    for b in ("base", "head"):
        best = 1e9
        for _ in range(7):
            t = time.perf_counter()
            subprocess.run([f"{w}/memplan.{b}", "tune"] + args, capture_output=True)
            best = min(best, time.perf_counter() - t)
        out.append(f"{b} {best * 1000:.1f} ms")
    print("tune", " ".join(args), ":", ", ".join(out))
PY
GOMAXPROCS=1 go test ./tuner -run X -bench AdviseAllocConf -benchtime 20x | grep Benchmark
(cd planner && MEMPLAN_PLAN_TIMES=1 GOMAXPROCS=1 go test -run TestPlanEstimateTimes -v . | grep -E "plan [0-9]|fit:")
(cd planner && GOMAXPROCS=1 go test -run X -bench 'BenchmarkPlan70B/simulator' -benchtime 1x . | grep Benchmark)
(cd report && GOMAXPROCS=1 go test -run X -bench 'Report50x12$' -benchtime 1x . | grep Benchmark)
rm -rf "$w"
echo "go $(go version | cut -d' ' -f3), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
