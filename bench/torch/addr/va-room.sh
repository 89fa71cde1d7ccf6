#!/usr/bin/env bash
# va-room.sh OUTDIR: va_room.py once per variant, each a fresh process on
# GPU 0, JSON lines to OUTDIR/va-room.jsonl, histories OUTDIR/LABEL.json
# (docs/allocator.md §8, thirty-fourth session).
set -u
out=${1:?usage: va-room.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
run() { local label=$1; shift; python3 "$here/va_room.py" --label "$label" --trace "$out/$label.json" "$@" >>"$out/va-room.jsonl" 2>>"$out/va-room.err"; }
run plain
run bf16 --dtype bfloat16
run pre1200 --pre 1200
run pre6000 --pre 6000
run k5 --kernels 5
run k15 --kernels 15
run k30 --kernels 30
run k30-after --kernels 30 --after
run pre6000-k30 --pre 6000 --kernels 30
