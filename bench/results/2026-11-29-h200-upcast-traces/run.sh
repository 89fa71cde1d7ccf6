#!/usr/bin/env bash
# FSDP2 through measure.py's fake process group, the model loaded in bf16 and its
# shards cast to fp32 after fully_shard (--load-dtype bf16: accelerate's
# fsdp2_prepare_model under mixed precision), the cache kept, the model on the
# host: three configurations measured with their allocator histories, one
# device call on one H200. Writes $OUT/upcast.jsonl, $OUT/cN.json.gz, env.txt.
set -u
out=${OUT:-/tmp/out-upcast}
mkdir -p "$out"
export HF_HUB_OFFLINE=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; } >"$out/env.txt" 2>&1
n=0
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout 150 python3 bench/torch/measure.py $line --label "$line" --trace "$out/c$n.json" >>"$out/upcast.jsonl" 2>>"$out/err.txt" ||
    echo "{\"label\": \"$line\", \"ok\": false}" >>"$out/upcast.jsonl"
  [[ -f $out/c$n.json ]] && gzip "$out/c$n.json"
done <<'GRID'
specs/llama-3.2-1b.yaml --batch 2 --dp 8 --zero 3 --load-dtype bf16 --keep-cache --host-init
specs/tinyllama-1.1b.yaml --batch 2 --dp 4 --zero 2 --checkpointing every-block --load-dtype bf16 --keep-cache --host-init
model/testdata/hf/qwen2.5-0.5b.json --hf --batch 4 --seq 2048 --dp 8 --zero 3 --precision amp-bf16 --load-dtype bf16 --keep-cache --host-init
GRID
tail -c 4000 "$out/err.txt" > "$out/err-tail.txt"; rm -f "$out/err.txt"
