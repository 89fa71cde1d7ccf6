#!/bin/bash
# static.sh: what loading the C library costs a memplan command at start
# (forty-first session; docs/probe.md, docs/performance.md). A Go "hello
# world" built without and with github.com/ebitengine/purego imported (the
# import alone links glibc dynamically), and the memplan estimate command
# built by default and with -tags nodriver (fully static): `perf stat`'s
# mean CPU time (task-clock) and wall time over 50 runs each on one core,
# and the libraries each binary needs. Run from the repository root;
# output: static.txt beside it.
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"; rm -rf internal/zzhello' EXIT
date -u; go version; git log --oneline -1; uptime
mkdir -p internal/zzhello
printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("hi\\n") }\n' >internal/zzhello/main.go
CGO_ENABLED=0 go build -o "$dir/hello" ./internal/zzhello
printf 'package main\n\nimport (\n\t"os"\n\n\t_ "github.com/ebitengine/purego"\n)\n\nfunc main() { os.Stdout.WriteString("hi\\n") }\n' >internal/zzhello/main.go
CGO_ENABLED=0 go build -o "$dir/hello-purego" ./internal/zzhello
CGO_ENABLED=0 go build -o "$dir/memplan" ./cmd/memplan
CGO_ENABLED=0 go build -tags nodriver -o "$dir/memplan-nodriver" ./cmd/memplan
stat() { # stat LABEL CMD...
	local l=$1; shift
	GOMAXPROCS=1 perf stat -r 50 -e task-clock "$@" 2>&1 >/dev/null |
		awk -v l="$l" '/task-clock/ {c=$1} /elapsed/ {printf "%-44s %6.2f ms CPU %6.2f ms wall\n", l, c, $1*1000}'
}
for b in hello hello-purego memplan memplan-nodriver; do
	echo "$b needs: $(readelf -d "$dir/$b" 2>/dev/null | awk '/NEEDED/ {printf "%s ", $5}')"
done
for round in 1 2; do
	stat "hello" "$dir/hello"
	stat "hello with purego" "$dir/hello-purego"
	for s in mlp gpt2-124m mistral-7b; do
		stat "memplan estimate $s" "$dir/memplan" estimate "specs/$s.yaml"
		stat "memplan (nodriver) estimate $s" "$dir/memplan-nodriver" estimate "specs/$s.yaml"
	done
done
