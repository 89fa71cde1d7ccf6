#!/usr/bin/env bash
# The thirty-ninth session's speed figures (docs/performance.md, "Thirty-ninth
# session"), on the development machine (2 shared cores, Go 1.26.8):
#   bash bench/results/2026-11-28-devvm-speed-39th/run.sh > bench/results/2026-11-28-devvm-speed-39th/out.txt 2>&1
# from the repository root. Needs valgrind and python3.
set -eu
root=$(pwd)
date -u; go version; uptime
echo "== the 50 × 12 report on one core, GOGC 100 (the test binary's default) and 400 (memplan's main)"
go test -c -o /tmp/rep39.test ./report
for g in 100 400 100 400; do
  (cd report && GOGC=$g GOMAXPROCS=1 /tmp/rep39.test -test.run X -test.bench Report50x12 -test.benchtime 2x | grep Bench | sed "s/^/GOGC=$g /")
done
echo "== CPU profile of the report (top by package)"
(cd report && GOMAXPROCS=1 /tmp/rep39.test -test.run X -test.bench Report50x12 -test.benchtime 2x -test.cpuprofile /tmp/rep39.prof >/dev/null)
go tool pprof -top -nodecount=400 /tmp/rep39.test /tmp/rep39.prof 2>/dev/null | awk 'NR>6 {f=$1; sub("s","",f); k="other";
  if ($6 ~ /memplan\/alloc/) k="alloc"; else if ($6 ~ /memplan\/estimate/) k="estimate"; else if ($6 ~ /^runtime|internal\/runtime/) k="runtime";
  t[k]+=f; all+=f} END {for (k in t) printf "%-9s %5.1f%% of flat samples\n", k, 100*t[k]/all}'
go tool pprof -top -cum /tmp/rep39.test /tmp/rep39.prof 2>/dev/null | grep -E "buildRank|tuner.Largest|fixer\).first1|replayStep" || true
echo "== the whole estimate command, least of 7 (ms), and memplan --help"
go build -o /tmp/memplan39 ./cmd/memplan
python3 - <<'P'
import subprocess, time
def least(args):
    ts = []
    for _ in range(7):
        t = time.perf_counter(); subprocess.run(args, capture_output=True); ts.append(time.perf_counter() - t)
    return 1000 * min(ts)
print("--help %.1f ms" % least(["/tmp/memplan39", "--help"]))
for s in ["specs/mlp.yaml", "specs/gpt2-124m.yaml", "specs/llama-3.2-1b.yaml", "specs/mistral-7b.yaml", "specs/llama-3-70b.yaml"]:
    print("%-26s %.1f ms" % (s, least(["/tmp/memplan39", "estimate", s])))
P
echo "== the 7B in-process estimate, instructions"
GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13
echo "== the report's counters (counters.patch applied in a worktree of this tree's commit)"
w=$(mktemp -d)
git worktree add --detach "$w" HEAD >/dev/null 2>&1
(cd "$w" && git apply "$root/bench/results/2026-11-28-devvm-speed-39th/counters.patch" &&
  GOMAXPROCS=1 go test -count=1 ./report -run TestStatReport -v | grep -v "^=== \|^--- \|^PASS\|^ok")
git worktree remove --force "$w"
