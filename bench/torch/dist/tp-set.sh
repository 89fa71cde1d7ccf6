#!/usr/bin/env bash
# tp-set.sh GRID NAME TIMEOUT: a held-out set of tp-run.sh lines (tp.py,
# cp.py, pp.py) in one device call, each line given TIMEOUT seconds. Writes
# into $OUT: NAME.jsonl, env.txt (machine-env.sh's record) and err.txt (the
# tail of the runs' standard error).
#   bash bench/torch/dist/tp-set.sh bench/torch/dist/heldout-74.txt heldout-74 140
set -u
grid=${1:?usage: tp-set.sh GRID NAME TIMEOUT}
name=${2:?usage: tp-set.sh GRID NAME TIMEOUT}
out=${OUT:-/tmp/out-$name}
mkdir -p "$out"
here=$(dirname "$0")
. "$here/machine-env.sh" "$out/env.txt"
TIMEOUT=${3:?usage: tp-set.sh GRID NAME TIMEOUT} bash "$here/tp-run.sh" "$grid" "$out/$name.jsonl"
if [[ -f $out/$name.jsonl.err ]]; then
  tail -c 30000 "$out/$name.jsonl.err" >"$out/err.txt"
  rm -f "$out/$name.jsonl.err"
fi
