#!/usr/bin/env python3
"""What room each step of bringing NCCL up leaves in the address space
(docs/allocator.md §8): after each step the rank allocates 32 MiB segments
(new segments of the caching allocator, nothing freed) until one lands
below every segment before it, so that the fillers show where the driver
had free room. Steps: a first segment; the default group's first
all_reduce (its communicator made and connected); a new group's first
all_reduce; a 256 MiB broadcast on it; a send and receive between ranks 0
and 1 (the point-to-point connection).

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_fill.py --label nccl-fill

Prints one JSON line per rank: [step, MiB, address] per segment."""
import argparse, json, os

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
a = ap.parse_args()
import torch
import torch.distributed as dist

from va_chunk import Segments

r = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(r)
s = Segments()
fill = lambda step: s.fill(step, limit=40)
s.new("start", 20)
fill("start")
dist.init_process_group("nccl")
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
fill("default group")
g = dist.new_group(list(range(dist.get_world_size())))
dist.all_reduce(x, group=g)
torch.cuda.synchronize()
fill("new group")
b = torch.ones(256 << 18, device="cuda")
dist.broadcast(b, 0, group=g)
torch.cuda.synchronize()
fill("broadcast")
if dist.get_rank() in (0, 1):
    y = torch.ones(1 << 20, device="cuda")
    if dist.get_rank() == 0:
        dist.send(y, 1)
    else:
        dist.recv(y, 0)
    torch.cuda.synchronize()
fill("send/recv")
print(json.dumps({"label": a.label, "rank": r, "segments": s.rows}), flush=True)
dist.barrier()
dist.destroy_process_group()
