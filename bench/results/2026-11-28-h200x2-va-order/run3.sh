export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
run() { CUDA_VISIBLE_DEVICES=0 python3 bench/torch/dist/va_order.py --order no-dist "$@" >> $OUT/va-order3.jsonl 2>>$OUT/va-order3.err; }
run --label plain
run --label flash-available --call "torch.backends.cuda.is_flash_attention_available()"
run --label sdpa-tiny --call "torch.nn.functional.scaled_dot_product_attention(*[torch.ones(1,1,8,64,device='cuda',dtype=torch.bfloat16)]*3)"
run --label matmul-tiny --call "torch.ones(8,8,device='cuda')@torch.ones(8,8,device='cuda')"
run --label randn-tiny --call "torch.randn(8,device='cuda')"
run --label config-only --import transformers --call "__import__('transformers').LlamaConfig(num_hidden_layers=1,hidden_size=64,intermediate_size=128,num_attention_heads=2,num_key_value_heads=2,vocab_size=100)"
run --label llama-tiny-cpu --import transformers --call "__import__('transformers').LlamaForCausalLM(__import__('transformers').LlamaConfig(num_hidden_layers=1,hidden_size=64,intermediate_size=128,num_attention_heads=2,num_key_value_heads=2,vocab_size=100))"
run --label llama-tiny-eager --import transformers --call "__import__('transformers').LlamaForCausalLM(__import__('transformers').LlamaConfig(num_hidden_layers=1,hidden_size=64,intermediate_size=128,num_attention_heads=2,num_key_value_heads=2,vocab_size=100,attn_implementation='eager'))"
date > $OUT/env3.txt
python3 - <<'P'
import json,os
for l in open(os.environ['OUT']+'/va-order3.jsonl'):
    d=json.loads(l); s=d['segments']; top=max(a for _,a in s)+32*2**20
    print(d['label'], [(m, round((top-a)/2**20)) for m,a in s][:3])
P
tail -5 $OUT/va-order3.err
