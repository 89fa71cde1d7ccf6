#!/usr/bin/env bash
# The third-step experiments (docs/allocator.md §8), measured against the
# session's end: the replay patch applied in a worktree, instructions of the
# 7B in-process estimate (bench/callgrind.sh) and the least wall time of 7
# runs of `memplan tune` on one core for three bundled specs, each side.
set -eu
root=$(pwd)
rm -rf /tmp/third && git worktree add --detach /tmp/third HEAD >/dev/null
(cd /tmp/third && git apply "$root/bench/results/2026-11-28-third-step-replay.patch")
go build -o /tmp/mp-end ./cmd/memplan
(cd /tmp/third && go build -o /tmp/mp-third ./cmd/memplan)
echo "== end";    GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13
echo "== replay"; (cd /tmp/third && GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13)
python3 - <<'PY'
import os, subprocess, time
env = dict(os.environ, GOMAXPROCS="1")
for spec in ["specs/gpt2-xl.yaml", "specs/mistral-7b.yaml", "specs/llama-3.2-1b.yaml"]:
    for b in ["/tmp/mp-end", "/tmp/mp-third"]:
        ts = []
        for _ in range(7):
            t = time.perf_counter(); subprocess.run([b, "tune", spec], capture_output=True, env=env); ts.append(time.perf_counter() - t)
        print(f"tune {spec} {b}: {1000 * min(ts):.1f} ms")
PY
git worktree remove --force /tmp/third
