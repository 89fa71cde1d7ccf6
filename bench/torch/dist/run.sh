#!/usr/bin/env bash
# run.sh GRID OUTDIR [BUDGET_SECONDS]: measures every configuration of GRID
# (lines: SPEC train.py-flags; # comments) on all local GPUs, one torchrun per
# configuration with its own timeout, appending one JSON line per
# configuration to OUTDIR/dist.jsonl as it completes (snapshots into
# OUTDIR/snapshots.tar, logs into OUTDIR/log.txt). Stops starting new
# configurations once BUDGET_SECONDS (default 100000) have passed.
#   bash bench/torch/dist/run.sh bench/torch/dist/heldout.txt /tmp/out
set -u
grid=${1:?usage: run.sh GRID OUTDIR [BUDGET]}
out=${2:?usage: run.sh GRID OUTDIR [BUDGET]}
budget=${3:-100000}
here=$(cd "$(dirname "$0")" && pwd)
ngpu=${NGPU:-$(nvidia-smi -L | wc -l)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
mkdir -p "$out"
tmp=$(mktemp -d)
start=$(date +%s)
n=0
while read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  n=$((n + 1))
  now=$(date +%s)
  if (( now - start > budget )); then
    echo "budget spent: skipped $line" >>"$out/log.txt"; continue
  fi
  # A per-line timeout: "T=SECONDS" as the first word, else 150 s.
  to=150
  if [[ $line == T=* ]]; then to=${line%% *}; to=${to#T=}; line=${line#* }; fi
  # "W=N F=0" first: rank 0 of an N-rank job alone on GPU 0 over torch's
  # fake process group (train.py's MEMPLAN_FAKE_WORLD), without torchrun;
  # labelled with the rest of the line and " [fake N rank 0]".
  fake=
  if [[ $line == W=*\ F=0\ * ]]; then fake=${line%% *}; fake=${fake#W=}; line=${line#* F=0 }; fi
  d=$tmp/c$n
  mkdir -p "$d"
  t0=$(date +%s.%N)
  echo "=== $n: $line" >>"$out/log.txt"
  label=$line
  if [[ -n $fake ]]; then
    label="$line [fake $fake rank 0]"
    # shellcheck disable=SC2086
    MEMPLAN_FAKE_WORLD=$fake timeout -k 10 "$to" python3 "$here/train.py" $line --result "$d" \
      --label "$label" >"$d/stdout.txt" 2>&1
  else
    # shellcheck disable=SC2086
    timeout -k 10 "$to" torchrun --standalone --nproc_per_node="$ngpu" "$here/train.py" $line --result "$d" \
      --label "$label" >"$d/stdout.txt" 2>&1
  fi
  rc=$?
  t1=$(date +%s.%N)
  tail -c 3000 "$d/stdout.txt" | grep -v '^\s*$' | tail -n 15 >>"$out/log.txt"
  python3 "$here/merge.py" "$d" "$label" "$(awk "BEGIN{print $t1 - $t0}")" "$rc" >>"$out/dist.jsonl"
  if ls "$d"/snapshot-rank*.pickle.gz >/dev/null 2>&1; then
    for f in "$d"/snapshot-rank*.pickle.gz; do mv "$f" "$d/c$n-$(basename "$f")"; done
    tarf=$out/snapshots.tar
    [[ -f $tarf && $(stat -c %s "$tarf") -gt 12000000 ]] && tarf=$out/snapshots2.tar
    [[ -f $tarf && $(stat -c %s "$tarf") -gt 12000000 ]] && tarf=$out/snapshots3.tar
    tar -C "$d" -rf "$tarf" $(cd "$d" && ls c$n-snapshot-rank*.pickle.gz)
  fi
done <"$grid"
rm -rf "$tmp"
