#!/usr/bin/env bash
# Whole-command wall times on the development machine at GOMAXPROCS=1 (issue
# 17's command targets: estimate <= 5 ms for every bundled spec, tune <= 50
# ms where batch 1 fits): memplan --help, then estimate and tune over
# specs/*.yaml, least and median of 7 runs each, timed from Python around
# subprocess.run, on a binary of the working tree's HEAD.
# Usage: bash bench/results/2026-11-27-devvm-speed-18th/run-b.sh > out-b.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
(cd "$root" && go build -o "$w/memplan" ./cmd/memplan)
echo "== $(git -C "$root" rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root" && python3 - "$w/memplan" <<'PY'
import glob, os, statistics, subprocess, sys, time
exe = sys.argv[1]
env = dict(os.environ, GOMAXPROCS="1")
def t(args, n=7):
    xs, rc = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        rc = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
        xs.append(time.perf_counter() - t0)
    return min(xs) * 1e3, statistics.median(xs) * 1e3, rc
print("help          least %.1f ms  median %.1f ms" % t([exe, "--help"])[:2])
for f in sorted(glob.glob("specs/*.yaml")):
    e = t([exe, "estimate", f])
    u = t([exe, "tune", f])
    print("%-34s estimate %5.1f / %5.1f ms   tune %6.1f / %6.1f ms (exit %d)" % (f, e[0], e[1], u[0], u[1], u[2]))
PY
rm -rf "$w"
