#!/bin/bash
# pairs.sh GRID NAME: runs GRID with tp-run.sh on a four-GPU machine, its two-GPU lines
# two at a time (GPUs 0,1 and 2,3), then its four-GPU lines; writes $OUT/NAME.jsonl
# and the tail of the jobs' logs to $OUT/NAME.err. TIMEOUT: seconds per line (240).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1
G=$1; N=$2; T=${TIMEOUT:-240}
grep -v '^#' $G | awk '$2==2' > /tmp/$N.g2; sed -n '1~2p' /tmp/$N.g2 > /tmp/$N.ga; sed -n '2~2p' /tmp/$N.g2 > /tmp/$N.gb
grep -v '^#' $G | awk '$2==4' > /tmp/$N.g4
(CUDA_VISIBLE_DEVICES=0,1 TIMEOUT=$T bash bench/torch/dist/tp-run.sh /tmp/$N.ga $OUT/$N-a.jsonl) &
(CUDA_VISIBLE_DEVICES=2,3 TIMEOUT=$T bash bench/torch/dist/tp-run.sh /tmp/$N.gb $OUT/$N-b.jsonl) &
wait
[ -s /tmp/$N.g4 ] && TIMEOUT=$T bash bench/torch/dist/tp-run.sh /tmp/$N.g4 $OUT/$N-c.jsonl
cat $OUT/$N-*.jsonl > $OUT/$N.jsonl 2>/dev/null
cat $OUT/$N-*.jsonl.err 2>/dev/null | grep -v "^\s*$" | tail -c 20000 > $OUT/$N.err; rm -f $OUT/$N-*.jsonl.err $OUT/$N-?.jsonl
