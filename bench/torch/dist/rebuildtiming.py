#!/usr/bin/env python3
"""rebuildtiming.py SPEC [--batch B] [--seq S] [--precision P] [--trials N] [--item]:
when does DDP's old flat bucket outlive its rebuild, and why?

ProcessGroupNCCL stashes the tensors of an asynchronous collective in its
Work (TensorShelf) so the caching allocator cannot reuse them while NCCL
reads them; DDP never calls work.wait() on its bucket all-reduces, so the
stash is emptied only after the watchdog thread, which wakes every 100 ms
(kWatchdogThreadSleepMillis), sees the collective complete and hands the
shelf to the process group, and the next collective on that process group
(workEnqueue) clears it (docs/multigpu.md, "DDP's bucket rebuild race").
The rebuild at the second step's forward broadcasts the new bucket layout
from rank 0 (sync_bucket_indices: two broadcasts, each followed by a copy
to the host that waits for the stream). So the old bucket is freed at the
rebuild only if a watchdog wake-up fell between the end of the first step's
last all-reduce and the rebuild's last broadcast.

Each trial wraps the model in a fresh DDP with a fresh AdamW (foreach),
runs one step, then the second step's forward, and records on one host
clock: when the first step's backward returned (t_bwd), when the stream
passed it (t_ar: an event recorded after backward, which waits for the
all-reduce, seen complete by a thread polling it every 50 µs), when the
optimizer step returned (t_opt) and when the stream passed it (t_opt_gpu),
the rebuild's start and end (Reducer._rebuild_buckets), memory_allocated()
around the rebuild (held: it rose by the old bucket) and after the second
step (freed by then or not). --item calls loss.item() after each step, as
a loop that logs its loss does; --pause S sleeps S seconds after the first
step (after torch.cuda.synchronize() with --sync), the fix memplan's tune
offers (--step-pause). Prints one JSON line per rank.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/rebuildtiming.py specs/gpt2-124m.yaml --batch 8 --seq 1024 [--pause 0.2 --sync]
"""
import argparse, json, threading, time

import hfloop  # the spec's model on each rank (bench/torch/dist/hfloop.py)


class Poller:
    """Host times at which CUDA events complete, seen from a side thread."""

    def __init__(self):
        self.pending, self.done, self.lock = {}, {}, threading.Lock()
        self.stop = False
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def watch(self, name, ev):
        with self.lock:
            self.pending[name] = ev

    def run(self):
        while not self.stop:
            with self.lock:
                items = list(self.pending.items())
            for name, ev in items:
                if ev.query():
                    t = time.perf_counter()
                    with self.lock:
                        self.pending.pop(name, None)
                        self.done[name] = t
            time.sleep(50e-6)

    def when(self, name):
        while True:
            with self.lock:
                if name in self.done:
                    return self.done[name]
            time.sleep(1e-4)


def main():
    ap = argparse.ArgumentParser()
    hfloop.add_args(ap)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--item", action="store_true", help="loss.item() after each step")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds to sleep after the first step")
    ap.add_argument("--sync", action="store_true", help="torch.cuda.synchronize() before the pause")
    a = ap.parse_args()
    # Not checkpointed whatever the spec says (GPT-2 XL's does): the window
    # is the first optimizer step's, and the recorded runs had none.
    torch, rank, spec, base, amp, ids = hfloop.setup(a, checkpointing=False)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    t = spec["training"]
    grad_bytes = sum(p.numel() * p.element_size() for p in base.parameters() if p.requires_grad)

    stamps = {}
    Reducer = torch._C._distributed_c10d.Reducer
    orig = Reducer._rebuild_buckets

    def timed(self):
        stamps["alloc_rb0"] = torch.cuda.memory_allocated()
        stamps["t_rb0"] = time.perf_counter()
        r = orig(self)
        stamps["t_rb1"] = time.perf_counter()
        stamps["alloc_rb1"] = torch.cuda.memory_allocated()
        stamps["rebuilt"] = bool(r)
        return r

    Reducer._rebuild_buckets = timed
    poll = Poller()
    trials = []
    for trial in range(a.trials):
        stamps.clear()
        model = DDP(base, device_ids=[rank])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        torch.cuda.synchronize()
        dist.barrier()

        def fwd():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                return model(input_ids=ids, labels=ids).loss

        t0 = time.perf_counter()
        loss = fwd()
        loss.backward()
        t_bwd = time.perf_counter()
        ev = torch.cuda.Event()
        ev.record()
        poll.watch(f"ar{trial}", ev)
        opt.step()
        t_opt = time.perf_counter()
        ev2 = torch.cuda.Event()
        ev2.record()
        poll.watch(f"opt{trial}", ev2)
        opt.zero_grad(set_to_none=True)
        if a.item:
            loss.item()
        if a.sync:
            torch.cuda.synchronize()
        if a.pause > 0:
            time.sleep(a.pause)
        t_loop = time.perf_counter()
        loss = fwd()  # the rebuild
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if a.item:
            loss.item()
        torch.cuda.synchronize()
        after2 = torch.cuda.memory_allocated()
        t_ar, t_opt_gpu = poll.when(f"ar{trial}"), poll.when(f"opt{trial}")
        rise = stamps.get("alloc_rb1", 0) - stamps.get("alloc_rb0", 0)
        trials.append({
            "trial": trial,
            "held_at_rebuild": rise > grad_bytes // 2,
            "rebuild_rise_bytes": rise,
            "allocated_after_step2": after2,
            "ms": {k: round((v - t0) * 1e3, 3) for k, v in
                   (("bwd_return", t_bwd), ("ar_done", t_ar), ("opt_return", t_opt), ("opt_done", t_opt_gpu),
                    ("loop_top", t_loop), ("rebuild_start", stamps.get("t_rb0", t0)),
                    ("rebuild_end", stamps.get("t_rb1", t0)))},
            "window_ms": round((stamps.get("t_rb1", t0) - t_ar) * 1e3, 3),
        })
        del model, opt, loss
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    poll.stop = True
    print(json.dumps({"spec": a.spec, "rank": rank, "batch": t["batch"], "seq": t["seq"], "precision": t["precision"],
                      "item": a.item, "pause": a.pause, "sync": a.sync, "grad_bytes": grad_bytes, "torch": torch.__version__, "trials": trials}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
