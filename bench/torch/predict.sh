#!/usr/bin/env bash
# predict.sh GRID: memplan's predictions for each line of a measurement grid
# (measure.py flags), one line each: LABEL peak-allocated peak-reserved
# device-total, in bytes. MEMPLAN names the binary (default: memplan),
# DEVICE the GPU (default: h100-80gb; h200-141gb for the H200 sets).
set -euf
memplan=${MEMPLAN:-memplan}
device=${DEVICE:-h100-80gb}
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  # shellcheck disable=SC2086
  set -- $line
  first=$1
  shift
  args=()
  hf=0
  for a in "$@"; do
    if [[ $a == --hf ]]; then hf=1; else args+=("$a"); fi
  done
  if ((hf)); then args=(--hf "$first" "${args[@]}"); else args=("$first" "${args[@]}"); fi
  env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF "$memplan" estimate --device "$device" --format json "${args[@]}" |
    jq -r --arg l "$line" '"\($l) \(.peak_allocated_bytes) \(.peak_reserved_bytes) \(.device_total_bytes)"'
done <"${1:?usage: predict.sh GRID}"
