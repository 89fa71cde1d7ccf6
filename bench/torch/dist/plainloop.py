#!/usr/bin/env python3
"""plainloop.py SPEC --mode ddp|zero1 [--batch B] [--seq S] [--precision P] [--steps N] [--log-every K]:
a data-parallel training loop as users write it, with nothing between the
steps but the loss's logging (loss.item() every K steps; 0: never), to see
whether DDP's old flat bucket outlives its rebuild there (docs/multigpu.md,
"DDP's bucket rebuild race"). Each rank prints one JSON line: its peak
allocated in every step (the peak statistics reset at each step's start,
host-side calls that wait for nothing).

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/plainloop.py specs/gpt2-xl.yaml --mode ddp --batch 2 --seq 1024
"""
import argparse, json

import hfloop  # the spec's model on each rank (bench/torch/dist/hfloop.py)


def main():
    ap = argparse.ArgumentParser()
    hfloop.add_args(ap)
    ap.add_argument("--mode", choices=["ddp", "zero1"], required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--log-every", dest="log_every", type=int, default=1)
    a = ap.parse_args()
    torch, rank, spec, model, amp, ids = hfloop.setup(a)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    t = spec["training"]
    model = DDP(model, device_ids=[rank])
    if a.mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    peaks, losses = [], []
    for step in range(a.steps):
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if a.log_every and step % a.log_every == 0:
            losses.append(loss.item())
        peaks.append(torch.cuda.max_memory_allocated())
    torch.cuda.synchronize()
    peaks.append(torch.cuda.max_memory_allocated())  # the last step's, once it has run
    print(json.dumps({"spec": a.spec, "mode": a.mode, "rank": rank, "batch": t["batch"], "seq": t["seq"],
                      "precision": t["precision"], "log_every": a.log_every, "step_peaks": peaks,
                      "torch": torch.__version__}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
