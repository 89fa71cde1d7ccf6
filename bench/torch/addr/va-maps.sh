#!/usr/bin/env bash
# va-maps.sh OUTDIR: va_maps.py's variants (docs/allocator.md §8,
# thirty-seventh session): single processes on GPU 0, then two ranks under
# torchrun with a pipeline's warm-up send and receive; JSON lines to
# OUTDIR/va-maps.jsonl, errors to OUTDIR/va-maps.err.
set -u
out=${1:?usage: va-maps.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
one() { CUDA_VISIBLE_DEVICES=0 python3 "$here/va_maps.py" --label "$@" >>"$out/va-maps.jsonl" 2>>"$out/va-maps.err"; }
two() { torchrun --standalone --nproc-per-node 2 "$here/va_maps.py" --label "$@" >>"$out/va-maps.jsonl" 2>>"$out/va-maps.err"; }
one plain
one pre1200 --pre 1200
one pre1200-init --pre 1200 --init
one pre1200-k30 --pre 1200 --kernels 30
two p2p-pre1200 --pre 1200 --p2p
two p2p-pre1200-init-k30 --pre 1200 --init --kernels 30 --p2p
