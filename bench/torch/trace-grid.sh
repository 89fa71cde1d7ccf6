#!/usr/bin/env bash
# trace-grid.sh NAME < GRID: runs each measure.py line of GRID (SPEC [flags];
# # comments) in a fresh process with its allocator history, on a lent
# machine. Writes into $OUT (default /tmp/out-NAME): NAME.jsonl (one record
# per line), cN.json.gz (line N's history, measure.py --trace), env.txt
# (date, GPU, driver, library versions), err-tail.txt (the runs' standard
# error, tail). Each run is allowed TIMEOUT seconds (default 150).
set -u
name=${1:?usage: trace-grid.sh NAME < GRID}
out=${OUT:-/tmp/out-$name}
here=$(dirname "$0")
mkdir -p "$out"
export HF_HUB_OFFLINE=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "transformers", transformers.__version__, "accelerate", accelerate.__version__)'; } >"$out/env.txt" 2>&1
n=0
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout "${TIMEOUT:-150}" python3 "$here/measure.py" $line --label "$line" --trace "$out/c$n.json" >>"$out/$name.jsonl" 2>>"$out/err.txt" ||
    echo "{\"label\": \"$line\", \"ok\": false}" >>"$out/$name.jsonl"
  [[ -f $out/c$n.json ]] && gzip "$out/c$n.json"
done
tail -c 6000 "$out/err.txt" >"$out/err-tail.txt"
rm -f "$out/err.txt"
