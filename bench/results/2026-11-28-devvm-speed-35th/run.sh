#!/usr/bin/env bash
# The thirty-fifth session's cost check (docs/performance.md): the session's
# base (da02149) and its end, alternately on one core, then the 7B estimate's
# instructions in each, and `tune` of GPT-2 XL (least of 7 wall times).
#   git worktree add --detach /tmp/base da02149
#   bash bench/results/2026-11-28-devvm-speed-35th/run.sh /tmp/base . > out.txt
set -u
base=${1:?usage: run.sh BASE_TREE HEAD_TREE}
head=${2:?usage: run.sh BASE_TREE HEAD_TREE}
uptime
bash "$head/bench/costcheck.sh" "$base" "$head" 2
for tree in "$base" "$head"; do
  echo "== $tree instructions"
  (cd "$tree" && GOGC=off GODEBUG=asyncpreemptoff=1 bash "$OLDPWD/$head/bench/callgrind.sh" ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13 2>&1 | tail -1)
done
for tree in "$base" "$head"; do
  (cd "$tree" && go build -o /tmp/memplan-cost ./cmd/memplan)
  echo "== $tree tune gpt2-xl (ms, least of 7)"
  python3 - <<'P'
import subprocess, time
best = min((lambda t0: (subprocess.run(["/tmp/memplan-cost", "tune", "specs/gpt2-xl.yaml"], capture_output=True, env={"GOMAXPROCS": "1", "PATH": "/usr/bin:/bin"}), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(7))
print(f"{best*1000:.1f}")
P
done
uptime
