#!/usr/bin/env python3
"""watchdog.py: does DDP's old flat gradient bucket outlive its bucket rebuild?

DDP (find_unused_parameters=False) puts every gradient in one flat bucket at
construction and rebuilds its buckets at the first forward after the first
synchronised backward (_rebuild_buckets). The first step's last all-reduce
ran on that bucket. Asked first: does ProcessGroupNCCL's bookkeeping of that
collective (its Work, which the watchdog thread keeps until it sees it
complete) keep the bucket alive past the rebuild? Measured
(bench/results/2026-11-26-h100x2-ddp-rebuild, docs/multigpu.md): with no
pause the bucket survives the rebuild and then idling, a synchronize and an
allocation (a deferred free would be processed), a small all-reduce and
gc.collect() alike; with 0.2 s or more between the steps it never does. The
holder is not identified.

Each trial builds a fresh DDP model (16 Linear 4096x4096, 1.07 GB of fp32
gradients), runs one step, optionally synchronises (--sync) and sleeps (--gap
seconds), runs the next forward (the rebuild), and records memory_allocated()
before that forward, right after it, and after what --then does. --loop runs a
loop of that many steps instead and records each step's end and peak. Prints
one JSON line per rank.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/watchdog.py [--gap 0] [--trials 6] [--then sleep|poll|collective|late-collective|malloc|gc] [--sync]
    torchrun --standalone --nproc-per-node 2 bench/torch/dist/watchdog.py --loop 6 [--gap 0.3]
"""
import argparse, gc, json, os, time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def poll(base, step=0.005, limit=2.0):
    """Seconds until memory_allocated() is back to base (None: not within limit)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        if torch.cuda.memory_allocated() <= base:
            return round(time.perf_counter() - t0, 4)
        time.sleep(step)
    return None


def toy(rank, width=4096, layers=16):
    """A fresh DDP of layers bias-free linear layers of width (layers ·
    width² · 4 bytes of fp32 gradients), its SGD and an input batch of 8."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).cuda()
    ddp = DDP(model, device_ids=[rank])
    return ddp, torch.optim.SGD(model.parameters(), lr=1e-3), torch.randn(8, width, device="cuda")


def first_step(ddp, opt, x, gap, sync):
    """The first training step, then a synchronize (sync) and gap seconds of sleep."""
    ddp(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if sync:
        torch.cuda.synchronize()
    if gap > 0:
        time.sleep(gap)


def trial(rank, gap, then, sync):
    ddp, opt, x = toy(rank)
    first_step(ddp, opt, x, gap, sync)
    before = torch.cuda.memory_allocated()
    t_ar = time.perf_counter()
    y = ddp(x)  # _rebuild_buckets: new buckets, the flat one dropped
    out = y.numel() * y.element_size()
    after = torch.cuda.memory_allocated() - out
    r = {"before": before, "after_rebuild": after}
    if then == "sleep":
        time.sleep(0.3)
        r["after_0.3s"] = torch.cuda.memory_allocated() - out
    elif then == "poll":
        # the saved activations stay: back to before plus them
        r["released_after_s"] = poll(before + (after - before) % (1 << 30) + out)
    elif then == "gc":
        time.sleep(0.3)
        r["after_0.3s"] = torch.cuda.memory_allocated() - out
        r["gc_found"] = gc.collect()
        r["after_gc"] = torch.cuda.memory_allocated() - out
    elif then == "malloc":
        # a deferred free (record_stream) is processed at the next malloc
        torch.cuda.synchronize()
        r["after_sync"] = torch.cuda.memory_allocated() - out
        z = torch.empty(1, device="cuda")
        r["after_malloc"] = torch.cuda.memory_allocated() - out - 512
        del z
    elif then == "late-collective":
        # the watchdog (every 100 ms) has seen the all-reduce complete and
        # moved its stash to the process group; the next collective empties it
        time.sleep(0.3)
        r["after_0.3s"] = torch.cuda.memory_allocated() - out
        z = torch.ones(1, device="cuda")
        dist.all_reduce(z)
        torch.cuda.synchronize()
        r["after_collective"] = torch.cuda.memory_allocated() - out - 512
    elif then == "collective":
        z = torch.ones(1, device="cuda")
        dist.all_reduce(z)
        torch.cuda.synchronize()
        r["after_collective"] = torch.cuda.memory_allocated() - out
        r["released_after_s"] = poll(before + (after - before) % (1 << 30) + out)
    r["since_step_s"] = round(time.perf_counter() - t_ar, 4)
    del y, ddp, opt
    torch.cuda.synchronize()
    return r


def loop(rank, gap, steps):
    """A training loop of steps steps with no host delay but gap seconds
    before the second step: memory_allocated() after each step (gradients
    dropped) and its peak within each step."""
    ddp, opt, x = toy(rank)
    out = []
    for i in range(steps):
        if i == 1 and gap > 0:
            time.sleep(gap)
        torch.cuda.reset_peak_memory_stats()
        ddp(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append({"end": torch.cuda.memory_allocated(), "peak": torch.cuda.max_memory_allocated()})
    torch.cuda.synchronize()
    del ddp, opt
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gap", type=float, default=0.0)
    ap.add_argument("--sync", action="store_true", help="torch.cuda.synchronize() after the first step")
    ap.add_argument("--loop", type=int, default=0, help="instead of trials: a loop of this many steps")
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--then", choices=["sleep", "poll", "collective", "late-collective", "malloc", "gc"], default="sleep",
                    help="after the rebuild: sleep 0.3 s, poll until the old bucket is freed, run a small all-reduce at once or after 0.3 s")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    if a.loop:
        trials = [loop(rank, a.gap, a.loop) for _ in range(a.trials)]
    else:
        trials = [trial(rank, a.gap, a.then, a.sync) for _ in range(a.trials)]
    print(json.dumps({"rank": rank, "gap": a.gap, "then": a.then, "sync": a.sync, "avoid_record_streams": os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS"),
                      "flat_bucket_bytes": 16 * 4096 * 4096 * 4, "torch": torch.__version__, "trials": trials}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
