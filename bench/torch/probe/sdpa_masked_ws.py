"""Which allocations does SDPA's backward make under a boolean mask?

    python3 bench/torch/probe/sdpa_masked_ws.py OUT.txt [BATCH SEQ]

Runs scaled_dot_product_attention with a boolean (sliding-window) mask in
bf16 on the GPU, as transformers' sdpa_attention_forward does for a
sliding layer past its window, in three layouts: as many key/value heads as
query heads with the value a transposed view of its projection (OLMo 3),
the same with a contiguous value, and grouped-query attention whose keys
and values are repeat_kv's copies (Mistral). For each it lists every
allocation of the backward pass (caching allocator history) with its size,
so the workspace can be set beside memplan's model (estimate/sliding.go).
With BATCH (default 1) and SEQ (default 4096) it runs the grouped-query
layout twice more, with the mask per sample ([batch, 1, s, s], as
transformers builds it) and shared ([1, 1, s, s]).
"""
import sys

import torch
import torch.nn.functional as F

b = int(sys.argv[2]) if len(sys.argv) > 2 else 1
s = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
h, d = 32, 128
window = 1024
dev = "cuda"


def mask(per_sample=False):
    i = torch.arange(s, device=dev)
    m = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    m = m[None, None]
    if per_sample:
        m = m.expand(b, 1, s, s).contiguous()
    return m


def case(name, kv_heads, v_view, per_sample=False):
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
    m = mask(per_sample)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    out = y.transpose(1, 2).contiguous()
    g = torch.randn_like(out)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out.backward(g)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    lines = ["== %s (batch %d, seq %d, kv_heads %d, value %s, mask %s)" % (
        name, b, s, kv_heads, "view" if v_view else "contiguous", "per sample" if per_sample else "shared")]
    for e in snap["device_traces"][0]:
        if e["action"] in ("alloc", "free_completed") and e["size"] >= 1 << 20:
            lines.append("%s %8.2f MiB" % (e["action"], e["size"] / 2**20))
    return lines


out = []
out += case("MHA, value a view (OLMo 3)", h, True)
out += case("MHA, value contiguous", h, False)
out += case("GQA, repeat_kv copies (Mistral)", 8, True)
out += case("GQA, mask per sample", 8, True, per_sample=True)
out += case("MHA, mask per sample", h, True, per_sample=True)
open(sys.argv[1], "w").write("\n".join(out) + "\n")
print("\n".join(out))
