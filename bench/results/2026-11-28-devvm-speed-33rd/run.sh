#!/usr/bin/env bash
# The thirty-third session's cost check (docs/performance.md): the session's
# base (ff5bf30, a worktree at /tmp/prev) and its end, alternately, on one
# core; then the 7B estimate's instructions at the end (17.32 million at
# the base, thirty-second session).
bash bench/costcheck.sh /tmp/prev /work/main 2
GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13
