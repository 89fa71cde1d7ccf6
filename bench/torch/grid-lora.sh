#!/usr/bin/env bash
# grid-lora.sh OUT.jsonl: runs the LoRA measurement grid with lora.py, one
# fresh process per configuration, appending JSON lines to OUT.jsonl. Each
# line of the grid is: SPEC [lora.py flags]. GRID=FILE reads the grid from
# FILE (default bench/torch/grid-lora.txt; the held-out set is
# bench/torch/heldout-lora.txt).
set -u
out=${1:?usage: grid-lora.sh OUT.jsonl}
here=$(dirname "$0")
grid=${GRID:-$here/grid-lora.txt}
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  # shellcheck disable=SC2086
  timeout 180 python3 "$here/lora.py" $line --label "$line" >>"$out" 2>>"$out.err" ||
    echo "{\"label\": \"$line\", \"ok\": false, \"error\": \"exit $?\"}" >>"$out"
done <"$grid"
