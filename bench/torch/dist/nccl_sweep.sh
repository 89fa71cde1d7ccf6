#!/usr/bin/env bash
# nccl_sweep.sh OUTDIR: NCCL device memory vs NCCL_BUFFSIZE, channel count,
# cuMem and the number of process groups, one torchrun per setting. Appends
# JSON lines (one per rank, with the channel count NCCL logged) to
# OUTDIR/nccl.jsonl. SETTINGS (environment, one setting per line) replaces
# the list below; ARGS is passed to nccl_sweep.py (e.g. "--subgroups 2").
#   NGPU=4 ARGS="--subgroups 2" SETTINGS=NCCL_BUFFSIZE=4194304 bash nccl_sweep.sh OUT
set -u
out=${1:?usage: nccl_sweep.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
ngpu=${NGPU:-$(nvidia-smi -L | wc -l)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=4
mkdir -p "$out"
while read -r setting; do
  [[ -z $setting || $setting == \#* ]] && continue
  log=$(mktemp)
  res=$(mktemp -d)
  # shellcheck disable=SC2086
  env $setting NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ALLOC timeout -k 5 60 \
    torchrun --standalone --nproc_per_node="$ngpu" "$here/nccl_sweep.py" ${ARGS:-} --out "$res" --label "$setting" >"$log" 2>&1
  rc=$?
  ch=$(grep -c 'Channel [0-9]*/[0-9]* : ' "$log")
  chn=$(grep -o 'Channel 00/[0-9]*' "$log" | head -1 | cut -d/ -f2)
  allocs=$(grep -c 'Alloc' "$log")
  cat "$res"/rank*.json 2>/dev/null | while read -r j; do
    echo "$j" | python3 -c "import json,sys; d=json.load(sys.stdin); d.update(exit=$rc, channels_logged='$chn', channel_lines=$ch, alloc_lines=$allocs); print(json.dumps(d))"
  done >>"$out/nccl.jsonl"
  [[ $rc == 0 ]] || tail -n 20 "$log" >>"$out/log.txt"
  grep -E 'ALLOC|Alloc|Channel 00|nvls|Connected|Trees|Ring 00|comm 0x' "$log" | head -n 120 >>"$out/nccl-alloc.log"
  rm -rf "$log" "$res"
done < <(if [[ -n ${SETTINGS:-} ]]; then printf '%s\n' "$SETTINGS"; else cat <<'SETTINGS'
NCCL_BUFFSIZE=4194304
NCCL_BUFFSIZE=1048576
NCCL_BUFFSIZE=8388608
NCCL_MIN_NCHANNELS=4 NCCL_MAX_NCHANNELS=4
NCCL_MIN_NCHANNELS=8 NCCL_MAX_NCHANNELS=8
NCCL_MIN_NCHANNELS=16 NCCL_MAX_NCHANNELS=16
NCCL_CUMEM_ENABLE=0
NCCL_COMM_SPLIT_SHARE_RESOURCES=1
SETTINGS
fi)
