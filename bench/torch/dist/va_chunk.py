#!/usr/bin/env python3
"""How much address space the driver reserves for a new segment
(docs/allocator.md §8): for each size in turn the rank allocates a segment
of it, then 32 MiB segments until one lands below every segment before it;
those carved from the new segment's chunk show its free room. With --dist
(under torchrun) the default group's first all_reduce runs first.

    python3 bench/torch/dist/va_chunk.py --label plain
    torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_chunk.py --dist --label nccl

Prints one JSON line per rank: [size MiB, role, address] per segment."""
import argparse, json, os

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--dist", action="store_true")
ap.add_argument("--sizes", default="20,256,64,512,128,290,1024,96,2048")
a = ap.parse_args()
import torch

r = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(r)
keep, out = [], []


def seg(mib, role):
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    out.append([mib, role, t.data_ptr()])
    return t.data_ptr()


if a.dist:
    import torch.distributed as dist
    dist.init_process_group("nccl")
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
for mib in (int(s) for s in a.sizes.split(",")):
    low = min([x[2] for x in out], default=1 << 62)
    seg(mib, "request")
    low = min(low, out[-1][2])
    for _ in range(80):
        if seg(32, "filler") < low:
            break
print(json.dumps({"label": a.label, "rank": r, "segments": out}), flush=True)
if a.dist:
    dist.barrier()
    dist.destroy_process_group()
