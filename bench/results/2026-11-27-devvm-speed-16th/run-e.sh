#!/usr/bin/env bash
# `memplan estimate` with the allocator advice's estimates in the
# background (tuner.StartAdviceEstimates) against the commit before it, on
# the 2-core development machine: 30 runs of each binary interleaved, on
# all cores and at GOMAXPROCS=1 (where nothing runs in the background),
# least and median wall time (docs/performance.md, "Sixteenth session").
# Usage: bash bench/results/2026-11-27-devvm-speed-16th/run-e.sh BEFORE AFTER > out-e.txt
set -u
root=$(git rev-parse --show-toplevel)
w=$(mktemp -d)
for rev in "$1" "$2"; do
	git -C "$root" worktree add --detach "$w/t" "$rev" >/dev/null 2>&1
	(cd "$w/t" && go build -o "$w/memplan.$rev" ./cmd/memplan)
	git -C "$root" worktree remove --force "$w/t"
done
echo "== $1 -> $2 $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)"
cd "$root"
python3 - "$w/memplan.$1" "$w/memplan.$2" <<'PY'
import os, statistics, subprocess, sys, time
old, new = sys.argv[1], sys.argv[2]
one = dict(os.environ, GOMAXPROCS="1")
def run(b, s, env=None):
    t = time.perf_counter()
    subprocess.run([b, "estimate", s], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - t) * 1000
for s in ["specs/gpt2-124m.yaml", "specs/llama-3-8b.yaml", "specs/gpt2-xl.yaml", "specs/llama-3-70b.yaml"]:
    r = {k: [] for k in ("before", "after", "before/1", "after/1")}
    for _ in range(30):
        r["before"].append(run(old, s)); r["after"].append(run(new, s))
        r["before/1"].append(run(old, s, one)); r["after/1"].append(run(new, s, one))
    print("%-24s" % s, "  ".join("%s %.1f/%.1f ms" % (k, min(v), statistics.median(v)) for k, v in r.items()))
PY
rm -rf "$w"
echo "go $(go version | cut -d' ' -f3), $(nproc) cores"
