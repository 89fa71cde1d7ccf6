#!/usr/bin/env python3
"""Which way the driver carves the context chunk's room that a library's
first kernels open (docs/allocator.md §8, thirty-fourth session): the tiny
MoE's histories carve it upwards from 64 MiB, as va_libs.py's matmul case
does; SmolLM3's, Llama 4's, Phi-2's and OLMo's put cuBLAS's workspace at
320 MiB and the next segments below it. Here a process maps --pre MiB of
segments first (a model's load), runs --kernels distinct PyTorch kernels
(each first launch loads its module), then its first cuBLAS product, then
the fixed sequence of new segments va_libs.py uses. Prints one JSON line:
label, the options, and [MiB, address] per segment of the sequence; with
--trace FILE the allocator's history (every segment, the workspace too).

    python3 bench/torch/addr/va_room.py --label k20 --kernels 20
"""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--pre", type=int, default=0, help="MiB of segments mapped first, in 44 MiB pieces")
ap.add_argument("--kernels", type=int, default=0, help="distinct kernels run before the first product")
ap.add_argument("--after", action="store_true", help="run the kernels after the product instead")
ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
ap.add_argument("--trace")
ap.add_argument("--sizes", default="20,16,16,20,16,16,16,64,64,64,32,20,20,20,20,20,128,32,32,32,32,600,64")
a = ap.parse_args()
import torch

torch.cuda.set_device(0)
if a.trace:
    torch.cuda.memory._record_memory_history(max_entries=100000)
keep, out = [], []
for _ in range(a.pre // 44):
    keep.append(torch.empty(44 << 20, dtype=torch.uint8, device="cuda"))


def kernels(n):
    """n distinct kernels on small tensors (each a new module to load)."""
    x = torch.ones(256, 256, device="cuda")
    i = torch.arange(256, device="cuda")
    ops = [lambda: x + 1, lambda: x * 2, lambda: x.exp(), lambda: x.sin(), lambda: x.cos(),
           lambda: x.cumsum(0), lambda: x.sum(0), lambda: x.softmax(-1), lambda: torch.triu(x),
           lambda: x.index_select(0, i), lambda: torch.where(x > 0, x, -x), lambda: x.rsqrt(),
           lambda: torch.nn.functional.layer_norm(x, (256,)), lambda: x.max(0).values, lambda: x.argmax(0),
           lambda: torch.nn.functional.embedding(i, x), lambda: x.to(torch.bfloat16), lambda: x.pow(2),
           lambda: x.mean(-1), lambda: torch.nn.functional.silu(x), lambda: x.tanh(), lambda: x.clamp(0, 1),
           lambda: torch.cat([x, x]), lambda: x.transpose(0, 1).contiguous(), lambda: x.float().var(0),
           lambda: torch.nn.functional.gelu(x), lambda: x.sqrt(), lambda: x.log1p(), lambda: x.abs(), lambda: x.neg()]
    for f in ops[:n]:
        keep.append(f())
    torch.cuda.synchronize()


if a.kernels and not a.after:
    kernels(a.kernels)
dt = getattr(torch, a.dtype)
m = torch.ones(64, 64, device="cuda", dtype=dt)
keep.append(m @ m)  # cuBLAS's first product: its handle and workspace
torch.cuda.synchronize()
if a.kernels and a.after:
    kernels(a.kernels)
for mib in (int(s) for s in a.sizes.split(",")):
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    out.append([mib, t.data_ptr()])
print(json.dumps({"label": a.label, "pre": a.pre, "kernels": a.kernels, "after": a.after, "dtype": a.dtype, "segments": out}), flush=True)
if a.trace:
    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import measure  # bench/torch/measure.py
    measure.write_trace(a.trace, torch)
