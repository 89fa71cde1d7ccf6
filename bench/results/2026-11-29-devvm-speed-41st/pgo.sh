#!/bin/bash
# pgo.sh: the forty-first session's figures for profile-guided optimisation
# (cmd/memplan/default.pgo, written by bench/pgo.sh): each figure with the
# profile and without (-pgo=off), on the development machine. Run from the
# repository root; output: pgo.txt beside it.
#
#   bash bench/results/2026-11-29-devvm-speed-41st/pgo.sh > bench/results/2026-11-29-devvm-speed-41st/pgo.txt 2>&1
set -euo pipefail
P=$PWD/cmd/memplan/default.pgo
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
date -u; go version; git log --oneline -1; uptime
echo "== predictdump (every committed prediction) built with and without the profile"
go build -pgo=off -o "$dir/pd-off" ./internal/predictdump
go build -pgo="$P" -o "$dir/pd-pgo" ./internal/predictdump
"$dir/pd-off" >"$dir/off.txt"; "$dir/pd-pgo" >"$dir/pgo.txt"
cmp "$dir/off.txt" "$dir/pgo.txt" && echo "identical, $(wc -l <"$dir/off.txt") lines"
echo "== instructions per iteration (bench/callgrind.sh), without and with"
for b in '^BenchmarkEstimate$/^7b-32layer$ 7' '^BenchmarkEstimateMix$ 5'; do
	set -- $b
	GOFLAGS=-pgo=off GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate "$1" "$2"
	GOFLAGS=-pgo=$P GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate "$1" "$2"
done
echo "== CPU time on one core, alternately: the 50 x 12 report (GOGC=400, as memplan runs it) and the 7B estimate"
go test -pgo=off -c -o "$dir/r-off" ./report; go test -pgo="$P" -c -o "$dir/r-pgo" ./report
go test -pgo=off -c -o "$dir/e-off" ./estimate; go test -pgo="$P" -c -o "$dir/e-pgo" ./estimate
for round in 1 2 3 4; do
	for v in off pgo; do
		r=$(cd report && GOMAXPROCS=1 GOGC=400 "$dir/r-$v" -test.run X -test.bench BenchmarkReport50x12 -test.benchtime 3x | awk '/^Bench/ {print $5}')
		e=$(cd estimate && GOMAXPROCS=1 "$dir/e-$v" -test.run X -test.bench 'BenchmarkEstimate$/7b' -test.benchtime 300x | awk '/^Bench/ {print $5}')
		echo "round $round $v: report $r cpu-s, 7B $e cpu-ms"
	done
done
echo "== the estimate command on one core, least of 15 wall times (ms), without and with"
go build -pgo=off -o "$dir/m-off" ./cmd/memplan; go build -pgo="$P" -o "$dir/m-pgo" ./cmd/memplan
for v in off pgo; do
	printf '%s:' "$v"
	for s in mlp gpt2-124m llama-3.2-1b mistral-7b gpt2-xl llama-3-70b; do
		python3 - "$dir/m-$v" "specs/$s.yaml" <<'PY'
import os, subprocess, sys, time
env = dict(os.environ, GOMAXPROCS="1")
best = min((lambda t0: (subprocess.run([sys.argv[1], "estimate", sys.argv[2]], stdout=subprocess.DEVNULL, env=env, check=True), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(15))
print(" %s %.1f" % (os.path.basename(sys.argv[2])[:-5], best * 1e3), end="")
PY
	done
	echo
done
uptime
