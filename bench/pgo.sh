#!/bin/bash
# pgo.sh: writes cmd/memplan/default.pgo, the CPU profile the Go toolchain
# uses to optimise the memplan binary (profile-guided optimisation: `go
# build` and `go run` of ./cmd/memplan read default.pgo beside the main
# package; docs/performance.md, "Forty-first session"). The profile is
# what memplan's searches spend their time on: the 50 × 12 report (batch
# searches, fixes, replayed steps), single estimates from GPT-2 to
# Llama-3-70B and the 128-expert MoE, tune's analytic searches and the 70B
# plans, each on one core, merged. The compiler only inlines and lays out
# code otherwise, so predictions do not move (predictdump's output is
# byte-identical with and without the profile on amd64; on arm64, which
# may fuse a multiply and an add once a call is inlined, a float's last
# bit could) and a stale profile costs speed only: run this again after
# changes to the simulator's hot paths. Run from the repository root:
#
#   bash bench/pgo.sh
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
prof() { # prof NAME PACKAGE BENCH BENCHTIME
	GOMAXPROCS=1 go test -pgo=off "$2" -run X -bench "$3" -benchtime "$4" -cpuprofile "$dir/$1.prof" -o "$dir/$1.test" >/dev/null
}
prof report ./report '^BenchmarkReport50x12$' 2x
prof estimate ./estimate '^BenchmarkEstimate$/^(gpt2|7b-32layer|gpt2-xl|llama-3-70b|moe-128-experts)$' 50x
prof tune ./tuner '^BenchmarkTune$' 20x
prof plan ./planner '^BenchmarkPlan70B$/^simulator' 1x
go tool pprof -proto "$dir"/*.prof >cmd/memplan/default.pgo 2>/dev/null
echo "wrote cmd/memplan/default.pgo ($(wc -c <cmd/memplan/default.pgo) bytes)"
