export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
H=model/testdata/hf/llama4-test-4layer.json
run() { CUDA_VISIBLE_DEVICES=0 python3 bench/torch/dist/va_order.py --order no-dist "$@" >> $OUT/va-order2.jsonl 2>>$OUT/va-order2.err; }
run --label plain
run --label import-transformers --import transformers
run --label import-flex --import torch.nn.attention.flex_attention
run --label import-both --import transformers,torch.nn.attention.flex_attention
run --label hf-meta --hf $H
run --label hf-meta-again --hf $H
run --label hf-cpu --hf $H --hf-device cpu
run --label hf-meta-qwen3 --hf model/testdata/hf/qwen3-0.6b.json
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env2.txt; date >> $OUT/env2.txt
python3 - <<'P'
import json,os
for l in open(os.environ['OUT']+'/va-order2.jsonl'):
    d=json.loads(l); s=d['segments']; top=max(a for _,a in s)+32*2**20
    print(d['label'], [(m, round((top-a)/2**20)) for m,a in s][:4])
P
tail -3 $OUT/va-order2.err
