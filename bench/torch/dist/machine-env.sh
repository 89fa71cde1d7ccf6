#!/usr/bin/env bash
# machine-env.sh FILE, sourced by a multi-GPU run script on a lent machine:
# keeps NVLink multicast off and the Hub offline in every process it starts
# (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1, HF_HUB_OFFLINE=1) and writes the date, the GPUs,
# the driver and the library versions to FILE, the record every results
# folder keeps.
#   . bench/torch/dist/machine-env.sh "$out/env.txt"
export HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "transformers", transformers.__version__)'
} >"${1:?usage: . machine-env.sh FILE}" 2>&1
