#!/bin/bash
# run.sh: the speed targets (issue 17) on the host CPU of an H200 machine,
# forty-first session, with binaries built on the development machine into
# bin/speed41 (git-ignored; carried) by:
#   export CGO_ENABLED=0 GOOS=linux GOARCH=amd64 L="-s -w"; B=bin/speed41
#   go build -ldflags="$L" -o $B/memplan ./cmd/memplan     # the default build (purego, cmd/memplan/default.pgo)
#   go build -ldflags="$L" -tags nodriver -o $B/memplan-nodriver ./cmd/memplan  # static
#   (a Go "hello world" as $B/hello)
#   go test -c -ldflags="$L" -pgo=off -o $B/estimate-off.test ./estimate   # and -pgo=cmd/memplan/default.pgo as estimate-pgo.test
#   go test -c -ldflags="$L" -pgo=off -o $B/report-off.test ./report       # and report-pgo.test
# Run on the device from the repository root: bash bench/results/2026-11-29-h200host-speed-41st/run.sh
# Output in $OUT: env.txt, commands.txt, estimate.txt, report.txt.
set -uo pipefail
B=$PWD/bin/speed41
R=${OUT:-/tmp/out}
mkdir -p "$R"
(date -u; nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz"; uptime; nvidia-smi --query-gpu=name,utilization.gpu --format=csv) >"$R/env.txt" 2>&1
# Whole commands: least and median of 15 runs, timed from Python around
# subprocess.run, for every bundled spec, both builds, on all cores and on one.
python3 - "$B" >"$R/commands.txt" 2>&1 <<'PY'
import glob, os, statistics, subprocess, sys, time
B = sys.argv[1]
def t(cmd, env=None, n=15):
    xs = []
    for _ in range(n):
        s = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        xs.append(time.perf_counter() - s)
    return "%6.2f %6.2f" % (min(xs) * 1e3, statistics.median(xs) * 1e3)
one = dict(os.environ, GOMAXPROCS="1")
print("least and median of 15, ms: default build (all cores, one core), static -tags nodriver (all cores, one core)")
print("%-44s %s" % ("hello", t([B + "/hello"])))
print("%-44s %s | %s" % ("--help", t([B + "/memplan", "--help"]), t([B + "/memplan-nodriver", "--help"])))
for s in sorted(glob.glob("specs/*.yaml")) + sorted(glob.glob("specs/*/*.yaml")):
    print("%-44s %s %s | %s %s" % (s, t([B + "/memplan", "estimate", s]), t([B + "/memplan", "estimate", s], one),
                                 t([B + "/memplan-nodriver", "estimate", s]), t([B + "/memplan-nodriver", "estimate", s], one)))
PY
cd estimate
for round in 1 2; do for v in off pgo; do
	echo "== round $round $v" >>"$R/estimate.txt"
	GOMAXPROCS=1 "$B/estimate-$v.test" -test.run X -test.bench '^BenchmarkEstimate$/^(gpt2|7b-32layer|gpt2-xl|llama-3-70b|moe-128-experts)$' -test.benchtime 100x >>"$R/estimate.txt" 2>&1
done; done
echo "== cold, pgo" >>"$R/estimate.txt"
GOMAXPROCS=1 "$B/estimate-pgo.test" -test.run X -test.bench '^BenchmarkEstimateCold$' -test.benchtime 30x >>"$R/estimate.txt" 2>&1
cd ../report
for p in 1 16; do for round in 1 2; do for v in off pgo; do
	echo "== GOMAXPROCS=$p round $round $v" >>"$R/report.txt"
	GOMAXPROCS=$p GOGC=400 "$B/report-$v.test" -test.run X -test.bench 'Report50x12' -test.benchtime 2x >>"$R/report.txt" 2>&1
done; done; done
uptime >>"$R/env.txt"
grep -h "Benchmark\|==" "$R/estimate.txt" "$R/report.txt" | head -80
head -5 "$R/commands.txt"
