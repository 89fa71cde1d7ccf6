#!/usr/bin/env bash
# Forty-sixth session: `memplan tune` on an H100 (80 GB) for every bundled spec and imported config (at 2,048 tokens),
# least of three runs on one core; the fifteen slowest, and how many miss issue 17's targets (50 ms where batch 1
# fits, 1 s where it does not). From the repository root:
#   bash bench/results/2026-11-29-devvm-speed-46th/tune-times.sh > bench/results/2026-11-29-devvm-speed-46th/tune-times.txt
set -eu
go build -o /tmp/mp-tune-times ./cmd/memplan
date -u; uptime
python3 - <<'P'
import glob, os, subprocess, time
env = dict(os.environ, GOMAXPROCS="1")
rows = []
for f in sorted(glob.glob("specs/*.yaml")) + sorted(glob.glob("model/testdata/hf/*.json")):
    args = ["/tmp/mp-tune-times", "tune"] + (["--hf", f, "--seq", "2048"] if f.endswith(".json") else [f]) + ["--device", "h100-80gb"]
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run(args, capture_output=True, env=env)
        ts.append(1000 * (time.perf_counter() - t))
    fits = b"does not fit" not in r.stdout + r.stderr
    rows.append((min(ts), f, fits))
rows.sort(reverse=True)
for ms, f, fits in rows[:15]:
    print("%7.1f ms  %-8s %s" % (ms, "fits" if fits else "no fit", f))
print("over 50 ms where batch 1 fits: %d of %d" % (sum(1 for ms, f, fits in rows if fits and ms > 50), sum(1 for r in rows if r[2])))
print("over 1 s where it does not: %d of %d" % (sum(1 for ms, f, fits in rows if not fits and ms > 1000), sum(1 for r in rows if not r[2])))
P
