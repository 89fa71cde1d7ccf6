export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
CUDA_VISIBLE_DEVICES=0 python3 - > $OUT/config-calls.txt 2>&1 <<'P'
import sys, torch, transformers
seen = []
def prof(frame, event, arg):
    if event in ("call", "c_call"):
        mod = frame.f_globals.get("__name__", "")
        name = arg.__qualname__ if event == "c_call" and hasattr(arg, "__qualname__") else frame.f_code.co_name
        if mod.startswith(("torch.cuda", "torch.backends", "torch._C", "torch.utils.cpp", "triton")) or (event == "c_call" and "cuda" in str(getattr(arg, "__module__", "") or "")):
            seen.append((event, mod, name))
    return prof
f, t = torch.cuda.mem_get_info()
sys.setprofile(prof)
cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2, vocab_size=100)
sys.setprofile(None)
f2, t2 = torch.cuda.mem_get_info()
print("used before/after (MiB):", (t - f) >> 20, (t2 - f2) >> 20)
import collections
for k, v in collections.Counter(seen).most_common(60):
    print(v, k)
P
cat $OUT/config-calls.txt | head -70
