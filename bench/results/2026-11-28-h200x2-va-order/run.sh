export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
for o in init-first device-first; do torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_order.py --order $o --label $o >> $OUT/va-order.jsonl 2>>$OUT/va-order.err; done
torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_order.py --order init-first --hf model/testdata/hf/llama4-test-4layer.json --label init-first-hf >> $OUT/va-order.jsonl 2>>$OUT/va-order.err
CUDA_VISIBLE_DEVICES=0 python3 bench/torch/dist/va_order.py --order no-dist --hf model/testdata/hf/llama4-test-4layer.json --label no-dist-hf >> $OUT/va-order.jsonl 2>>$OUT/va-order.err
CUDA_VISIBLE_DEVICES=0 python3 bench/torch/dist/va_order.py --order no-dist --label no-dist >> $OUT/va-order.jsonl 2>>$OUT/va-order.err
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt; date >> $OUT/env.txt
python3 - <<'P'
import json
for l in open(__import__('os').environ['OUT']+'/va-order.jsonl'):
    d=json.loads(l); s=d['segments']; top=max(a for _,a in s)+32*2**20
    print(d['label'], d['rank'], [(m, round((top-a)/2**20)) for m,a in s][:6])
P
tail -3 $OUT/va-order.err
