#!/usr/bin/env python3
"""racesnap.py OUTDIR: allocator snapshots (torch.cuda.memory._dump_snapshot,
history with Python stacks) of a small DDP model after its second step's
bucket rebuild, one where the old flat bucket outlived the rebuild (the race,
docs/multigpu.md) and one where it did not (a synchronize and 0.3 s of sleep
after the first step): the fixtures of memplan diagnose's race finding
(diagnose/testdata). Each rank tries up to --trials fresh DDPs without a pause
until one races, writes OUTDIR/race-rankR.pickle, then one with the pause,
OUTDIR/norace-rankR.pickle, and prints one JSON line.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/racesnap.py OUT
"""
import argparse, json, os

import torch
import torch.distributed as dist

import watchdog  # the toy DDP model and its first step (bench/torch/dist/watchdog.py)


def trial(rank, pause):
    """A fresh DDP of 16 MiB of gradients: one step, the pause (after a
    synchronize), the second forward. Returns whether the old flat bucket
    was still allocated after the rebuild, and what to keep alive until the
    snapshot."""
    ddp, opt, x = watchdog.toy(rank, width=1024, layers=4)
    watchdog.first_step(ddp, opt, x, pause, sync=pause > 0)
    before = torch.cuda.memory_allocated()
    y = ddp(x)  # _rebuild_buckets
    after = torch.cuda.memory_allocated() - y.numel() * y.element_size()
    return after - before > 4 * 1024 * 1024 * 4 // 2, (ddp, opt, y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--trials", type=int, default=8)
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    os.makedirs(a.out, exist_ok=True)
    got = {}
    for name, pause in (("race", 0.0), ("norace", 0.3)):
        for i in range(a.trials):
            torch.cuda.memory._record_memory_history(max_entries=20000, stacks="python")
            held, keep = trial(rank, pause)
            want = name == "race"
            if held == want and name not in got:
                path = os.path.join(a.out, f"{name}-rank{rank}.pickle")
                torch.cuda.memory._dump_snapshot(path)
                got[name] = {"trial": i, "file": os.path.basename(path), "bytes": os.path.getsize(path)}
            torch.cuda.memory._record_memory_history(enabled=None)
            del keep
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            dist.barrier()
    print(json.dumps({"rank": rank, "torch": torch.__version__, "snapshots": got}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
