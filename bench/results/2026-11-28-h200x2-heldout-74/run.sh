#!/usr/bin/env bash
# Held-out set 74 on two GPUs, one device call:
#   bash bench/results/2026-11-28-h200x2-heldout-74/run.sh
# Results in $OUT (heldout-74.jsonl, err.txt, env.txt).
set -u
out=${OUT:-/tmp/out74}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "transformers", transformers.__version__)'; } >"$out/env.txt" 2>&1
TIMEOUT=140 bash bench/torch/dist/tp-run.sh bench/torch/dist/heldout-74.txt "$out/heldout-74.jsonl"
tail -c 30000 "$out/heldout-74.jsonl.err" >"$out/err.txt"; rm -f "$out/heldout-74.jsonl.err"
