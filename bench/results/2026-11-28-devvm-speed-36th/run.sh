#!/bin/bash
# run.sh BASE NEW: the 7B in-process estimate's instructions (callgrind) at
# two trees, BASE first; the thirty-sixth session's cost check
# (docs/performance.md). Needs valgrind.
set -euo pipefail
for tree in "$1" "$2"; do
	echo "== $tree ($(git -C "$tree" rev-parse --short HEAD))"
	(cd "$tree" && GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13)
done
