#!/usr/bin/env bash
# Forty-sixth session, dev VM: a fresh process's estimate command before and after sizing the step recording's and
# the layout print's buffers once (estimate's startLog, alloc's AppendLayout) instead of growing them by doubling,
# from the repository root, with the tree before the change in BASE (git worktree add --detach /tmp/b46c 12e1b60):
#   BASE=/tmp/b46c bash bench/results/2026-11-29-devvm-speed-46th/presize.sh > bench/results/2026-11-29-devvm-speed-46th/presize.txt 2>&1
# For four specs on one core: perf stat's page faults (10 runs each build), then wall times of 60 runs of each
# build alternately (min, first quartile, median); then the warm in-process estimate (BenchmarkEstimate) of both.
set -u
base=${BASE:?set BASE to a worktree of the base}
date -u; uptime
(cd "$base" && go build -o /tmp/mp-presize-before ./cmd/memplan)
go build -o /tmp/mp-presize-after ./cmd/memplan
for spec in gpt2-124m tinyllama-1.1b llama-3-8b llama-3-70b; do
  for w in before after; do
    printf '%-15s %-6s ' "$spec" "$w"
    GOMAXPROCS=1 perf stat -r 10 -e page-faults /tmp/mp-presize-$w estimate specs/$spec.yaml 2>&1 >/dev/null |
      awk '/page-faults/ {print $1 " page faults"}'
  done
  python3 - "$spec" <<'P'
import os, statistics, subprocess, sys, time
spec = "specs/%s.yaml" % sys.argv[1]
bins = ["/tmp/mp-presize-before", "/tmp/mp-presize-after"]
env = dict(os.environ, GOMAXPROCS="1")
ts = {b: [] for b in bins}
for i in range(60):
    for b in (bins if i % 2 == 0 else bins[::-1]):
        t = time.perf_counter()
        subprocess.run([b, "estimate", spec], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        ts[b].append(1000 * (time.perf_counter() - t))
for b in bins:
    v = sorted(ts[b])
    print("  %-24s wall min %.2f  p25 %.2f  median %.2f ms" % (os.path.basename(b), v[0], v[len(v) // 4], statistics.median(v)))
P
done
for tree in "$base" "$PWD"; do
  echo "== warm, $tree"
  (cd "$tree" && GOMAXPROCS=1 go test ./estimate -run X -bench 'Estimate/(gpt2|7b-32layer)$' -benchtime 300x 2>&1 | grep Benchmark)
done
