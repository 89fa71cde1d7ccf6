#!/usr/bin/env bash
# va-nccl.sh OUTDIR: va_nccl.py on two GPUs once per variant, each a fresh
# torchrun (docs/allocator.md §8, thirty-fourth session): NCCL's defaults
# twice (run to run), modules loaded eagerly, NCCL without cuMem, 96 MiB
# fillers, and the default group's first collective a broadcast or an
# all_gather. JSON lines to OUTDIR/va-nccl.jsonl, histories and NCCL's logs
# (NCCL_DEBUG_SUBSYS=INIT,ALLOC) under OUTDIR/LABEL/.
set -u
out=${1:?usage: va-nccl.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
run() { # LABEL ENV... -- ARGS...
  local label=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$out/$label"
  env "${envs[@]}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ALLOC NCCL_DEBUG_FILE="$out/$label/nccl.%h.%p.log" \
    torchrun --standalone --nproc-per-node 2 "$here/va_nccl.py" --label "$label" --snap "$out/$label" "$@" \
    >>"$out/va-nccl.jsonl" 2>>"$out/$label/stderr.txt"
}
run default X=1 --
run default-again X=1 --
run eager CUDA_MODULE_LOADING=EAGER --
run nocumem NCCL_CUMEM_ENABLE=0 --
run fill96 X=1 -- --mib 96 --fill 14
run first-broadcast X=1 -- --first broadcast
run first-gather X=1 -- --first all_gather
