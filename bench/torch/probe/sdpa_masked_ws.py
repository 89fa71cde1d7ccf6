"""Which allocations does SDPA's backward make under a boolean mask?

    python3 bench/torch/probe/sdpa_masked_ws.py OUT.txt

Runs scaled_dot_product_attention with a boolean (sliding-window) mask in
bf16 on the GPU, as transformers' sdpa_attention_forward does for a
sliding layer past its window, in three layouts: as many key/value heads as
query heads with the value a transposed view of its projection (OLMo 3),
the same with a contiguous value, and grouped-query attention whose keys
and values are repeat_kv's copies (Mistral). For each it lists every
allocation of the backward pass (caching allocator history) with its size,
so the workspace can be set beside memplan's model (estimate/sliding.go).
"""
import sys

import torch
import torch.nn.functional as F

b, h, s, d = 1, 32, 4096, 128
window = 1024
dev = "cuda"


def mask():
    i = torch.arange(s, device=dev)
    m = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    return m[None, None]


def case(name, kv_heads, v_view):
    torch.cuda.empty_cache()
    x = torch.randn(b, s, h * d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    q = x.view(b, s, h, d).transpose(1, 2).contiguous()
    k = (x[..., : kv_heads * d] * 2).view(b, s, kv_heads, d).transpose(1, 2).contiguous()
    vp = x[..., : kv_heads * d] * 3
    v = vp.view(b, s, kv_heads, d).transpose(1, 2)
    if not v_view:
        v = v.contiguous()
    if kv_heads != h:
        rep = h // kv_heads
        k = k[:, :, None].expand(b, kv_heads, rep, s, d).reshape(b, h, s, d)
        v = v[:, :, None].expand(b, kv_heads, rep, s, d).reshape(b, h, s, d)
    m = mask()
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    out = y.transpose(1, 2).contiguous()
    g = torch.randn_like(out)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out.backward(g)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    lines = ["== %s (kv_heads %d, value %s)" % (name, kv_heads, "view" if v_view else "contiguous")]
    for e in snap["device_traces"][0]:
        if e["action"] in ("alloc", "free_completed") and e["size"] >= 1 << 20:
            lines.append("%s %8.2f MiB" % (e["action"], e["size"] / 2**20))
    return lines


out = []
out += case("MHA, value a view (OLMo 3)", h, True)
out += case("MHA, value contiguous", h, False)
out += case("GQA, repeat_kv copies (Mistral)", 8, True)
open(sys.argv[1], "w").write("\n".join(out) + "\n")
print("\n".join(out))
