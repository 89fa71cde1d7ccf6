#!/usr/bin/env bash
# grid.sh OUT.jsonl: runs the measurement grid, one fresh process per
# configuration, appending JSON lines to OUT.jsonl. Each line of the grid
# below is: SPEC [measure.py flags]. GRID=FILE reads the grid from FILE;
# TIMEOUT=S bounds each run (default 120 s).
set -uf # -f: no globbing, so a list value such as [256:1,>:8] passes as it is
out=${1:?usage: grid.sh OUT.jsonl}
here=$(dirname "$0")
grid=${GRID:-$here/grid.txt}
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  # shellcheck disable=SC2086
  timeout "${TIMEOUT:-120}" python3 "$here/measure.py" $line --label "$line" >>"$out" 2>>"$out.err" ||
    echo "{\"label\": \"$line\", \"ok\": false, \"error\": \"exit $?\"}" >>"$out"
done <"$grid"
