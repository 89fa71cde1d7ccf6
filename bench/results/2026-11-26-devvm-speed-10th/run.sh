#!/usr/bin/env bash
# The tenth session's speed runs on the development VM: whole `memplan
# estimate SPEC` commands (least of nine, old and new alternating) and the
# planner's 70B benchmark at one core, for 7eda7e9 (the session's base) and
# the commit this file was added in. From the repository root:
#   git worktree add --detach /tmp/base 7eda7e9
#   (cd /tmp/base && go build -o /tmp/memplan-old ./cmd/memplan && go test -c -o /tmp/planner-old.test ./planner)
#   go build -o /tmp/memplan-new ./cmd/memplan && go test -c -o /tmp/planner-new.test ./planner
#   bash bench/results/2026-11-26-devvm-speed-10th/run.sh > bench/results/2026-11-26-devvm-speed-10th/out.txt
set -u
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(go version | cut -d' ' -f3-4), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "## memplan estimate SPEC: least of 9 runs, ms (old = 7eda7e9, new = this commit)"
python3 - <<'PY'
import glob, subprocess, time
def once(b, s):
    st = time.perf_counter()
    subprocess.run([b, "estimate", s], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - st) * 1000
for s in sorted(glob.glob("specs/*.yaml")):
    best = {"old": 1e9, "new": 1e9}
    for _ in range(9):  # old and new alternate, so load affects both alike
        for b in best:
            best[b] = min(best[b], once("/tmp/memplan-" + b, s))
    print("%-36s old %6.1f  new %6.1f" % (s, best["old"], best["new"]))
PY
echo "## BenchmarkPlan70B, GOMAXPROCS=1 (load $(cut -d' ' -f1-3 /proc/loadavg))"
for b in old new; do
  (cd planner && GOMAXPROCS=1 /tmp/planner-$b.test -test.run X -test.bench 'Plan70B/simulator' -test.benchtime 1x | grep Benchmark | sed "s/^/$b /")
done
