export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
run() { CUDA_VISIBLE_DEVICES=0 python3 bench/torch/dist/va_order.py --order no-dist "$@" >> $OUT/va-order5.jsonl 2>>$OUT/va-order5.err; }
run --label plain
run --label import-triton --import triton
run --label import-triton-language --import triton.language
run --label triton-driver --import triton.runtime.driver --call "__import__('triton').runtime.driver.active.get_current_device()"
run --label triton-utils --import triton.runtime.driver --call "__import__('triton').runtime.driver.active.utils"
run --label config-only --import transformers --call "__import__('transformers').LlamaConfig(num_hidden_layers=1,hidden_size=64,intermediate_size=128,num_attention_heads=2,num_key_value_heads=2,vocab_size=100)"
date > $OUT/env5.txt
python3 - <<'P'
import json,os
for l in open(os.environ['OUT']+'/va-order5.jsonl'):
    d=json.loads(l); s=d['segments']; top=max(a for _,a in s)+32*2**20
    print(d['label'], [(m, round((top-a)/2**20)) for m,a in s][:3])
P
tail -5 $OUT/va-order5.err
