#!/usr/bin/env bash
# va-setup.sh OUTDIR: va_room.py once per set-up a training script makes
# before its first segment (none, a transformers config, Triton's driver,
# torchvision's resnet18, a small transformers model), with and without
# memory mapped first and a cuBLAS product before the sequence; each a fresh
# process on GPU 0, JSON lines to OUTDIR/va-setup.jsonl, histories
# OUTDIR/LABEL.json (docs/allocator.md §8, thirty-seventh session). SET 2
# (the session's second call): with a 16 MiB anchor first, memory mapped
# with and without kernels (and random fills, and copies from the host)
# before the product.
set -u
out=${1:?usage: va-setup.sh OUTDIR [SET]}
set=${2:-1}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
run() { local label=$1; shift; python3 "$here/va_room.py" --label "$label" --trace "$out/$label.json" "$@" >>"$out/va-setup.jsonl" 2>>"$out/va-setup.err"; }
if [ "$set" = 2 ]; then
  run a-plain --anchor
  run a-pre1200 --anchor --pre 1200
  run a-pre1200-k1 --anchor --pre 1200 --kernels 1
  run a-pre1200-k5 --anchor --pre 1200 --kernels 5
  run a-pre1200-k15 --anchor --pre 1200 --kernels 15
  run a-pre1200-k30 --anchor --pre 1200 --kernels 30
  run a-pre1200-init --anchor --pre 1200 --init
  run a-pre1200-copy --anchor --pre 1200 --copy
  run a-pre1200-copy-k5 --anchor --pre 1200 --copy --kernels 5
  run a-k5-pre1200 --anchor --pre 1200 --kernels 5 --kernels-first
  run a-config-pre1200-init --anchor --setup config --pre 1200 --init
  run a-config-pre1200-copy-k5 --anchor --setup config --pre 1200 --copy --kernels 5
  exit 0
fi
run plain
run plain-noprod --no-product
run config --setup config
run config-noprod --setup config --no-product
run triton --setup triton
run torchvision --setup torchvision
run model --setup model
run pre1200 --pre 1200
run config-pre1200 --setup config --pre 1200
run config-pre1200-k30 --setup config --pre 1200 --kernels 30
run model-pre1200-noprod --setup model --pre 1200 --no-product
