#!/usr/bin/env bash
# tp-run.sh GRID OUT.jsonl: runs each line of GRID (SCRIPT NPROC ARGS...) as a
# fresh torchrun job on this machine, appending its JSON line to OUT.jsonl
# and its log to OUT.jsonl.err. NVLink multicast (NVLS) is kept off, as on
# the machines the data-parallel measurements were taken on.
#
#   bench/torch/dist/tp-run.sh bench/torch/dist/tp-grid.txt results.jsonl
#   bench/torch/dist/tp-run.sh bench/torch/dist/tp-heldout.txt heldout.jsonl   # after committing predictions
set -u
grid=${1:?usage: tp-run.sh GRID OUT.jsonl}
out=${2:?usage: tp-run.sh GRID OUT.jsonl}
here=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
# TIMEOUT: seconds per configuration (600). SNAPDIR: when set, every
# configuration records its allocator history and dumps one snapshot per rank
# there (SNAPDIR/cN-rankR.pickle, N the configuration's line among those run).
# A line that starts with F=R runs rank R of the NPROC-rank job alone on GPU
# 0, over torch's fake process group (common.py's MEMPLAN_FAKE_WORLD), without
# torchrun: one process, whatever the machine's GPUs; its record is labelled
# with the line (without F=R) and " [fake NPROC rank R]".
# DEADLINE (seconds since the epoch): a line not started by then is recorded
# as not run.
n=0
while read -r script nproc args; do
  [[ -z ${script:-} || $script == \#* ]] && continue
  if [[ -n ${DEADLINE:-} ]] && (( $(date +%s) >= DEADLINE )); then
    echo "{\"label\": \"$script $nproc $args\", \"ok\": false, \"error\": \"not started: past DEADLINE\"}" >>"$out"
    continue
  fi
  if [[ $script == F=* ]]; then
    rank=${script#F=}
    script=$nproc
    read -r nproc args <<<"$args"
    n=$((n + 1))
    if [[ -n ${SNAPDIR:-} ]]; then mkdir -p "$SNAPDIR"; export MEMPLAN_SNAPSHOT=$SNAPDIR/c$n; fi
    # shellcheck disable=SC2086
    MEMPLAN_FAKE_WORLD=$nproc MEMPLAN_FAKE_RANK=$rank timeout "${TIMEOUT:-600}" python3 "$here/$script" $args \
      --label "$script $nproc $args" >>"$out" 2>>"$out.err" ||
      echo "{\"label\": \"$script $nproc $args [fake $nproc rank $rank]\", \"ok\": false, \"error\": \"exit $?\"}" >>"$out"
    continue
  fi
  if (( nproc > gpus )); then
    echo "{\"label\": \"$script $nproc $args\", \"ok\": false, \"error\": \"needs $nproc GPUs, $gpus here\"}" >>"$out"
    continue
  fi
  n=$((n + 1))
  if [[ -n ${SNAPDIR:-} ]]; then mkdir -p "$SNAPDIR"; export MEMPLAN_SNAPSHOT=$SNAPDIR/c$n; fi
  # shellcheck disable=SC2086
  timeout "${TIMEOUT:-600}" torchrun --standalone --nproc-per-node "$nproc" "$here/$script" $args --label "$script $nproc $args" \
    >>"$out" 2>>"$out.err" ||
    echo "{\"label\": \"$script $nproc $args\", \"ok\": false, \"error\": \"exit $?\"}" >>"$out"
done <"$grid"
