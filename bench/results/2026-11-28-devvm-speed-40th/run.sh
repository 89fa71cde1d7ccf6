#!/usr/bin/env bash
# The fortieth session's speed figures (docs/performance.md, "Fortieth
# session"), on the development machine (2 shared cores, Go 1.26.8): the
# session's base, d544ac5, in a worktree, against the tree it runs in,
# alternately:
#   git worktree add --detach /tmp/prev d544ac5
#   bash bench/results/2026-11-28-devvm-speed-40th/run.sh /tmp/prev > bench/results/2026-11-28-devvm-speed-40th/out.txt 2>&1
# from the repository root. Needs valgrind and python3.
set -eu
base=${1:?usage: run.sh BASE_TREE}
date -u; go version; uptime
echo "base: $(cd "$base" && git log --oneline -1)"
echo "now:  $(git log --oneline -1)"
(cd "$base" && go test -c -o /tmp/rep40-base.test ./report && go build -o /tmp/memplan40-base ./cmd/memplan)
go test -c -o /tmp/rep40-now.test ./report
go build -o /tmp/memplan40-now ./cmd/memplan
echo "== the 50 × 12 report on one core (cpu-s/op, estimates/op), GOGC 100 (the test binary's default) and 400"
for i in 1 2 3; do
  for t in base now; do
    for g in 100 400; do
      (cd report && GOGC=$g GOMAXPROCS=1 /tmp/rep40-$t.test -test.run X -test.bench Report50x12 -test.benchtime 2x |
        awk -v t=$t -v g=$g '/^Benchmark/ {print t, "GOGC=" g, $5, $7}')
    done
  done
done
echo "== the whole estimate command, least of 11 (ms), one core and two"
python3 - <<'P'
import os, subprocess, time
def least(args, env):
    ts = []
    for _ in range(11):
        t = time.perf_counter(); subprocess.run(args, capture_output=True, env=env); ts.append(time.perf_counter() - t)
    return 1000 * min(ts)
for procs in ["1", "2"]:
    env = dict(os.environ, GOMAXPROCS=procs)
    for t in ["base", "now"]:
        b = "/tmp/memplan40-" + t
        row = ["--help %.1f" % least([b, "--help"], env)]
        for s in ["mlp", "gpt2-124m", "llama-3.2-1b", "mistral-7b", "gpt2-xl", "llama-3-70b"]:
            row.append("%s %.1f" % (s, least([b, "estimate", "specs/%s.yaml" % s], env)))
        print("GOMAXPROCS=%s %-4s %s" % (procs, t, "  ".join(row)))
P
echo "== tune, one core, least of 3: every bundled spec and imported config (configs at --seq 2048) on three devices"
python3 - <<'P'
import glob, os, subprocess, time
env = dict(os.environ, GOMAXPROCS="1")
for dev in ["h100-80gb", "h200-141gb", "mi300x"]:
    fit, nofit = [], []
    for s in sorted(glob.glob("specs/*.yaml")) + sorted(glob.glob("model/testdata/hf/*.json")):
        args = ["/tmp/memplan40-now", "tune", s, "--device", dev] + (["--seq", "2048"] if s.endswith(".json") else [])
        ts = []
        for _ in range(3):
            t = time.perf_counter(); r = subprocess.run(args, capture_output=True, env=env); ts.append(time.perf_counter() - t)
        (fit if r.returncode == 0 else nofit if r.returncode == 4 else []).append((1000 * min(ts), s))
    fit.sort(); nofit.sort()
    print("%-10s batch 1 fits: %d, slowest %.1f ms (%s); does not fit: %d, slowest %.1f ms (%s)" % (
        dev, len(fit), fit[-1][0], fit[-1][1], len(nofit), nofit[-1][0], nofit[-1][1]))
P
echo "== instructions (callgrind, GOGC=off): BenchmarkEstimateMix and the 7B in-process estimate"
for t in "$base" .; do
  (cd "$t" && GOGC=off GODEBUG=asyncpreemptoff=1 bash "$OLDPWD/bench/callgrind.sh" ./estimate '^BenchmarkEstimateMix$' 5 | tail -1 | sed "s|^|$t |")
  (cd "$t" && GOGC=off GODEBUG=asyncpreemptoff=1 bash "$OLDPWD/bench/callgrind.sh" ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13 | tail -1 | sed "s|^|$t |")
done
