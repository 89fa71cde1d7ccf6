#!/usr/bin/env python3
"""Where the driver places a fixed sequence of new segments when a library
first runs a kernel between them (docs/allocator.md §8, thirty-third
session): the single-GPU counterpart of bench/torch/dist/va_seq.py. Each
request is a fresh segment of the caching allocator (nothing is freed, so
no cached block serves it); after the --at-th request the process runs its
first --event (a cuDNN convolution, GroupNorm, a cuBLAS product, a grouped
product, random initialisation, or none), whose kernels the driver loads
lazily and whose handles the libraries create then. Prints one JSON line:
label, event, at, and [MiB, address] per request; with --trace FILE writes
the allocator's history in measure.py's --trace format (every segment the
caching allocator made, the libraries' workspaces included), which alloc's
TestVADebug sets beside the address model's placement.

    python3 bench/torch/addr/va_libs.py --event conv --at 2 --label conv --trace conv.json
"""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--event", default="none", choices=["none", "conv", "groupnorm", "matmul", "grouped_mm", "randn", "all"])
ap.add_argument("--at", type=int, default=2)
ap.add_argument("--trace")
ap.add_argument("--sizes", default="20,64,64,64,98,50,28,22,32,2,32,22,30,40,54,66,72,100" + ",32" * 20 + ",600,64,64,1000,44")
a = ap.parse_args()
import torch
import torch.nn.functional as F

torch.cuda.set_device(0)
if a.trace:
    torch.cuda.memory._record_memory_history(max_entries=100000)
keep, out = [], []


def event(kind):
    dev, dt = "cuda", torch.bfloat16
    if kind in ("conv", "all"):
        x = torch.ones(2, 8, 16, 16, device=dev, dtype=dt)
        w = torch.ones(8, 8, 3, 3, device=dev, dtype=dt)
        keep.append(F.conv2d(x, w, padding=1))
    if kind in ("groupnorm", "all"):
        x = torch.ones(2, 8, 16, 16, device=dev, dtype=dt)
        keep.append(F.group_norm(x, 2))
    if kind in ("matmul", "all"):
        x = torch.ones(64, 64, device=dev, dtype=dt)
        keep.append(x @ x)
    if kind in ("grouped_mm", "all"):
        x = torch.ones(64, 64, device=dev, dtype=dt)
        w = torch.ones(2, 64, 64, device=dev, dtype=dt)
        offs = torch.tensor([32, 64], device=dev, dtype=torch.int32)
        keep.append(torch._grouped_mm(x, w, offs=offs))
    if kind in ("randn", "all"):
        keep.append(torch.randn(1024, device=dev).normal_(0, 0.02))
    torch.cuda.synchronize()


for i, mib in enumerate(int(s) for s in a.sizes.split(",")):
    if i == a.at and a.event != "none":
        event(a.event)
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    out.append([mib, t.data_ptr()])
print(json.dumps({"label": a.label, "event": a.event, "at": a.at, "segments": out}), flush=True)
if a.trace:
    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import measure  # bench/torch/measure.py
    measure.write_trace(a.trace, torch)
