#!/usr/bin/env bash
# probe.sh BIN OUTDIR: the probe benchmark of the CUDA probe issue. For every
# spec in specs/ it runs `BIN probe SPEC --format json` (and the text form for
# the record), then `BIN tune --probe` and `BIN check --probe --batch 1`, and
# writes the wall time of each whole run (process start, driver load, context
# creation included) to OUTDIR/times.tsv. Needs an NVIDIA GPU and driver.
set -u
bin=${1:?usage: probe.sh BIN OUTDIR}
out=${2:?usage: probe.sh BIN OUTDIR}
mkdir -p "$out"
now() { date +%s.%N; }
printf 'spec\tcommand\texit\tseconds\toutput\n' >"$out/times.tsv"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader >"$out/gpu.txt" 2>&1
for spec in specs/*.yaml; do
  name=$(basename "$spec" .yaml)
  i=0
  for cmd in "probe --format json" probe "tune --probe --format json" "check --probe --batch 1 --format json"; do
    i=$((i + 1))
    f=$name.$i.out
    t0=$(now)
    # shellcheck disable=SC2086
    "$bin" $cmd "$spec" >"$out/$f" 2>&1
    rc=$?
    t1=$(now)
    printf '%s\t%s\t%d\t%s\t%s\n' "$name" "$cmd" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" "$f" >>"$out/times.tsv"
  done
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader >>"$out/gpu.txt" 2>&1
