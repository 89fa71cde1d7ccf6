#!/usr/bin/env bash
# diag.sh OUTDIR: per-phase peaks and allocator traces for the configurations
# whose predictions missed (docs/accuracy.md). GRID=FILE reads the
# configurations from FILE instead of the list below.
set -u
o=${1:?usage: diag.sh OUTDIR}
h=$(dirname "$0")
i=0
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  i=$((i+1))
  # shellcheck disable=SC2086
  timeout 120 python3 "$h/measure.py" $line --steps 2 --phases --trace "$o/trace$i.json" --label "$line" >>"$o/diag.jsonl" 2>>"$o/diag.err"
done < <(if [[ -n ${GRID:-} ]]; then cat "$GRID"; else cat <<'GRID'
specs/gpt2-124m.yaml --batch 4
specs/mlp.yaml
specs/resnet-50.yaml --batch 64
specs/resnet-50.yaml --batch 128 --checkpointing every-block
GRID
fi)
