#!/usr/bin/env bash
# accelerate's cpu_ram_efficient_loading through measure.py's fake process group
# (--ram-efficient: the host model moved to meta and sharded there, then each full
# parameter moved to the GPU and scattered by accelerate's fsdp2_load_full_state_dict,
# as rank 0 runs it), the cache kept; the last line also casts the shards to fp32
# after (--load-dtype bf16): four configurations with their allocator histories, one
# device call on one H200 (tuning). Writes $OUT/ram.jsonl, cN.json.gz, env.txt,
# err-tail.txt (bench/torch/trace-grid.sh).
exec bash bench/torch/trace-grid.sh ram <<'GRID'
specs/llama-3.2-1b.yaml --batch 2 --dp 8 --zero 3 --keep-cache --host-init --ram-efficient
model/testdata/hf/qwen2.5-0.5b.json --hf --batch 4 --seq 2048 --dp 8 --zero 3 --precision amp-bf16 --keep-cache --host-init --ram-efficient
specs/tinyllama-1.1b.yaml --batch 2 --dp 4 --zero 2 --checkpointing every-block --keep-cache --host-init --ram-efficient
specs/llama-3.2-1b.yaml --batch 2 --dp 8 --zero 3 --keep-cache --host-init --ram-efficient --load-dtype bf16
GRID
