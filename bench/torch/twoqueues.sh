#!/usr/bin/env bash
# twoqueues.sh OUT Q0 Q1: runs two measurement queues side by side, queue
# Q0 on GPU 0 and Q1 on GPU 1 (one job per GPU, CUDA_VISIBLE_DEVICES). A
# queue is a list of "TOOL GRID NAME TRACED" entries separated by ';':
# TOOL measure.py or lora.py, GRID a grid file, NAME the JSON-lines file
# under OUT it appends to, TRACED how many of the grid's first lines also
# write their allocator history to OUT/NAME-i.json.gz. Each line gets 250 s.
set -u
out=${1:?usage: twoqueues.sh OUT Q0 Q1}
here=$(dirname "$0")
queue() {
  local gpu=$1 entries=$2
  IFS=';' read -ra list <<<"$entries"
  for e in "${list[@]}"; do
    read -r tool grid name traced <<<"$e"
    local i=0
    while read -r line; do
      [[ -z $line || $line == \#* ]] && continue
      i=$((i + 1))
      trace=()
      ((i <= traced)) && trace=(--trace "$out/$name-$i.json")
      # shellcheck disable=SC2086
      CUDA_VISIBLE_DEVICES=$gpu timeout 250 python3 "$here/$tool" $line "${trace[@]}" --label "$line" \
        >>"$out/$name.jsonl" 2>>"$out/err$gpu.txt" ||
        echo "{\"label\": \"$line\", \"ok\": false, \"error\": \"exit $?\"}" >>"$out/$name.jsonl"
      [[ -f $out/$name-$i.json ]] && gzip -f "$out/$name-$i.json"
    done <"$grid"
  done
}
queue 0 "${2:?}" &
queue 1 "${3:?}" &
wait
