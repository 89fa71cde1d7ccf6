#!/usr/bin/env python3
"""How much address space the driver reserves for a new segment
(docs/allocator.md §8): for each size in turn the rank allocates a segment
of it, then 32 MiB segments until one lands below every segment before it;
those carved from the new segment's chunk show its free room. With --dist
(under torchrun) the default group's first all_reduce runs first.

    python3 bench/torch/dist/va_chunk.py --label plain
    torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_chunk.py --dist --label nccl

Prints one JSON line per rank: [size MiB, role, address] per segment.
Segments (new segments kept, and 32 MiB fillers below) is va_fill.py's too."""
import argparse, json, os

import torch


class Segments:
    """New segments of the caching allocator, each kept (nothing is freed,
    so no cached block serves a request): rows of [tag, MiB, address]."""

    def __init__(self):
        self.keep, self.rows = [], []

    def new(self, tag, mib):
        t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
        self.keep.append(t)
        self.rows.append([tag, mib, t.data_ptr()])
        return t.data_ptr()

    def fill(self, tag, limit=80):
        """32 MiB segments until one lands below every segment before them."""
        low = min(x[2] for x in self.rows)
        for _ in range(limit):
            if self.new(tag, 32) < low:
                return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--dist", action="store_true")
    ap.add_argument("--sizes", default="20,256,64,512,128,290,1024,96,2048")
    a = ap.parse_args()
    r = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(r)
    if a.dist:
        import torch.distributed as dist
        dist.init_process_group("nccl")
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
    s = Segments()
    for mib in (int(v) for v in a.sizes.split(",")):
        s.new("request", mib)
        s.fill("filler")
    print(json.dumps({"label": a.label, "rank": r, "segments": [[m, tag, p] for tag, m, p in s.rows]}), flush=True)
    if a.dist:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
