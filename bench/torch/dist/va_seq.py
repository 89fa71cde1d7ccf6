#!/usr/bin/env python3
"""The driver's placement of a fixed sequence of new segments, in one
setting (docs/allocator.md §8): each request a fresh segment of the caching
allocator (nothing is freed, so no cached block serves it), its address
printed. With --dist (under torchrun) the process group comes up and runs a
first all_reduce before the sequence, or --dist-after: between its first
two requests.

    python3 bench/torch/dist/va_seq.py --label one-gpu               # CUDA_VISIBLE_DEVICES=0
    torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_seq.py --dist --label nccl

Prints one JSON line per rank: label, rank, visible GPUs, and [MiB, address]
per request."""
import argparse, json, os

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--dist", action="store_true")
ap.add_argument("--dist-after", dest="after", action="store_true")
ap.add_argument("--sizes", default="20,44,98,98,98,290,44,128,20,44" + ",32" * 20 + ",600,64,64,1000,44")
a = ap.parse_args()
import torch

r = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(r)
keep, out = [], []


def up():
    import torch.distributed as dist
    dist.init_process_group("nccl")
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    return x


if a.dist:
    keep.append(up())
for i, mib in enumerate(int(s) for s in a.sizes.split(",")):
    if a.after and i == 1:
        keep.append(up())
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    out.append([mib, t.data_ptr()])
print(json.dumps({"label": a.label, "rank": r, "visible": torch.cuda.device_count(), "segments": out}), flush=True)
if a.dist or a.after:
    import torch.distributed as dist
    dist.barrier()
    dist.destroy_process_group()
