#!/usr/bin/env bash
# The thirty-second session's cost check: the session's base (20e9c5c, a
# worktree in /tmp/base) against HEAD, then the 7B estimate's instructions.
set -u
bash bench/costcheck.sh /tmp/base /work/main 2
for tree in /tmp/base /work/main; do
  (cd "$tree" && GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13)
done
