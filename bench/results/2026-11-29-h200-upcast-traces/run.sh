#!/usr/bin/env bash
# FSDP2 through measure.py's fake process group, the model loaded in bf16 and its
# shards cast to fp32 after fully_shard (--load-dtype bf16: accelerate's
# fsdp2_prepare_model under mixed precision), the cache kept, the model on the
# host: three configurations measured with their allocator histories, one
# device call on one H200 (tuning). Writes $OUT/upcast.jsonl, cN.json.gz,
# env.txt, err-tail.txt (bench/torch/trace-grid.sh; the first run wrote its
# environment without accelerate's version).
exec bash bench/torch/trace-grid.sh upcast <<'GRID'
specs/llama-3.2-1b.yaml --batch 2 --dp 8 --zero 3 --load-dtype bf16 --keep-cache --host-init
specs/tinyllama-1.1b.yaml --batch 2 --dp 4 --zero 2 --checkpointing every-block --load-dtype bf16 --keep-cache --host-init
model/testdata/hf/qwen2.5-0.5b.json --hf --batch 4 --seq 2048 --dp 8 --zero 3 --precision amp-bf16 --load-dtype bf16 --keep-cache --host-init
GRID
