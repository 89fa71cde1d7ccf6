#!/bin/bash
# Produce every crash case, each in a fresh process, into $1 (default crashes/),
# (ddp-race, which needs two GPUs, only when named),
# with a manifest of the machine and what really caused each crash.
#   bench/torch/crash/run.sh OUTDIR [CASE...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-crashes}; shift || true
mkdir -p "$out"
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(frag-carve frag-carve+expandable leak-outputs-gpt2 leak-val-loss leak-cache pressure-gpt2-b160
         other-gpt2 pressure-qwen2.5-0.5b-b48 frag-mixed frag-mixed+expandable pressure-qwen3-0.6b-b16-frac0.25
         leak-outputs-qwen3 other-qwen2.5 ranks pressure-gpt2-b160+expandable)
fi
{
  echo "{\"date\": \"$(date -u +%FT%TZ)\","
  echo " \"gpu\": \"$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | paste -sd ";" -)\","
  python3 -c 'import torch, transformers, sys; print(" \"torch\": \"%s\", \"cuda\": \"%s\", \"transformers\": \"%s\", \"python\": \"%s\"}" % (torch.__version__, torch.version.cuda, transformers.__version__, sys.version.split()[0]))'
} > "$out/machine.json"
for c in "${cases[@]}"; do
  start=$(date +%s)
  conf=""
  case $c in *+expandable) conf="expandable_segments:True";; esac
  if [ "$c" = ddp-race ]; then
    # two GPUs, NCCL: each rank on its own (crash.py's ONE_GPU_PER_RANK);
    # torch 2.11's torchrun prefixes tee'd lines with "[defaultN]:"
    mkdir -p "$out/ddp-race"
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    timeout 90 torchrun --standalone --nproc_per_node 2 --tee 3 \
      "$here/crash.py" ddp-race "$out" > "$out/ddp-race/log.txt" 2>&1
  elif [ "$c" = ranks ]; then
    # torchrun does not prefix the ranks' lines unless asked: --tee 3 with the
    # prefix template gives the "[rank1]:" lines of the usual multi-rank log.
    mkdir -p "$out/ranks"
    timeout 60 torchrun --standalone --nproc_per_node 2 --tee 3 --log-line-prefix-template '[rank${rank}]:' \
      "$here/crash.py" ranks "$out" > "$out/ranks/log.txt" 2>&1
  else
    mkdir -p "$out/$c"
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 45 python3 "$here/crash.py" "$c" "$out" > "$out/$c/log.txt" 2>&1
  fi
  echo "$c: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/runs.txt"
done
