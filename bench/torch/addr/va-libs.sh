#!/usr/bin/env bash
# va-libs.sh OUTDIR: va_libs.py once per library event, each a fresh
# process on GPU 0, its JSON line to OUTDIR/va-libs.jsonl and its history to
# OUTDIR/EVENT.json (docs/allocator.md §8, thirty-third session).
set -u
out=${1:?usage: va-libs.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for ev in none conv groupnorm matmul grouped_mm randn all; do
  python3 "$here/va_libs.py" --event "$ev" --at 2 --label "$ev" --trace "$out/$ev.json" >>"$out/va-libs.jsonl" 2>>"$out/va-libs.err"
done
python3 "$here/va_libs.py" --event conv --at 0 --label conv-first --trace "$out/conv-first.json" >>"$out/va-libs.jsonl" 2>>"$out/va-libs.err"
