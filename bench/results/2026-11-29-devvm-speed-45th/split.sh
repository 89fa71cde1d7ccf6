#!/usr/bin/env bash
# Where a short `memplan estimate` spends its time on one core (docs/performance.md, forty-fifth session), from the
# repository root; output split.txt beside this script:
#   1. the command over every bundled spec as it runs and with --alloc-conf expandable_segments:True (no advice to
#      give), least and median of 7 runs;
#   2. in one fresh process per spec, the first estimate, the allocator advice and a warm estimate, least of 3
#      (tuner's TestAdviceCostDebug);
#   3. the process alone: `memplan --version` against a Go "hello world", CPU time and page faults (perf stat);
#   4. the default build against the static one (-tags nodriver) and the static one without urfave/cli's docs
#      (-tags nodriver,urfave_cli_no_docs): `--version` and BERT's estimate, least and median of 21;
#   5. with BASES (worktrees of earlier commits, space-separated), this tree's and theirs alternately on four specs.
#   git worktree add --detach /tmp/w43 a7cdcc6; git worktree add --detach /tmp/w44 bf177fe
#   BASES="/tmp/w43 /tmp/w44" bash bench/results/2026-11-29-devvm-speed-45th/split.sh > bench/results/2026-11-29-devvm-speed-45th/split.txt
set -eu
t=$(mktemp -d)
go build -o "$t/memplan" ./cmd/memplan
go test -c -o "$t/tuner.test" ./tuner
CGO_ENABLED=0 go build -tags nodriver -o "$t/memplan-static" ./cmd/memplan
CGO_ENABLED=0 go build -tags nodriver,urfave_cli_no_docs -o "$t/memplan-nodocs" ./cmd/memplan
bases=()
for b in ${BASES:-}; do
  (cd "$b" && go build -o "$t/memplan-$(git rev-parse --short HEAD)" ./cmd/memplan)
  bases+=("$t/memplan-$(git -C "$b" rev-parse --short HEAD)")
done
printf 'package main\n\nfunc main() { println("hi") }\n' >"$t/hello.go"
(cd "$t" && go mod init hello >/dev/null 2>&1 && go build -o hello hello.go)
date -u; uptime; go version
echo "== 1. the estimate command, GOMAXPROCS=1, ms (least / median of 7): as it runs | with expandable segments"
python3 - "$t/memplan" <<'PY'
import glob, os, subprocess, sys, time
env = dict(os.environ, GOMAXPROCS="1")
def t(args):
    ts = []
    for _ in range(7):
        a = time.perf_counter(); subprocess.run(args, capture_output=True, env=env); ts.append(1000 * (time.perf_counter() - a))
    ts.sort()
    return "%.1f / %.1f" % (ts[0], ts[3])
for s in sorted(glob.glob("specs/*.yaml")):
    print("%-22s %s | %s" % (os.path.basename(s)[:-5], t([sys.argv[1], "estimate", s]),
                             t([sys.argv[1], "estimate", s, "--alloc-conf", "expandable_segments:True"])))
PY
echo "== 2. one process per spec, GOMAXPROCS=1 (least first estimate of 3 runs)"
for s in specs/*.yaml; do
  for i in 1 2 3; do
    (cd tuner && GOMAXPROCS=1 MEMPLAN_ADVICE_COST=../$s "$t/tuner.test" -test.run TestAdviceCostDebug -test.v | grep -o '\.\./specs.*')
  done | sort -t' ' -k4 -n | head -1
done
echo "== 3. the process alone, GOMAXPROCS=1"
for b in "$t/memplan --version" "$t/hello"; do
  echo "${b#"$t/"}"
  # shellcheck disable=SC2086
  GOMAXPROCS=1 perf stat -r 30 -e task-clock,page-faults $b 2>&1 >/dev/null | grep -E "task-clock|page-faults|elapsed" | sed "s|$t/||"
done
echo "== 4. builds, GOMAXPROCS=1, ms (least / median of 21)"
python3 - "$t" <<'PY'
import os, subprocess, sys, time
env = dict(os.environ, GOMAXPROCS="1")
for b in ("memplan", "memplan-static", "memplan-nodocs"):
    for args in (["--version"], ["estimate", "specs/bert-base.yaml"]):
        ts = []
        for _ in range(21):
            a = time.perf_counter(); subprocess.run([os.path.join(sys.argv[1], b)] + args, capture_output=True, env=env)
            ts.append(1000 * (time.perf_counter() - a))
        ts.sort()
        print("%-15s %-30s %.2f / %.2f" % (b, " ".join(args), ts[0], ts[10]))
PY
if ((${#bases[@]})); then
  echo "== 5. this tree and BASES alternately, GOMAXPROCS=1, the estimate command, least of 9 ms"
  python3 - "$t/memplan" "${bases[@]}" <<'PY'
import os, subprocess, sys, time
env = dict(os.environ, GOMAXPROCS="1")
for s in ("specs/gpt2-124m.yaml", "specs/mistral-7b.yaml", "specs/llama-3-8b.yaml", "specs/llama-3-70b.yaml"):
    res = {b: [] for b in sys.argv[1:]}
    for _ in range(9):
        for b in sys.argv[1:]:
            a = time.perf_counter(); subprocess.run([b, "estimate", s], capture_output=True, env=env)
            res[b].append(1000 * (time.perf_counter() - a))
    print(s, "  ".join("%s %.1f" % (os.path.basename(b), min(v)) for b, v in res.items()))
PY
fi
rm -r "$t"
