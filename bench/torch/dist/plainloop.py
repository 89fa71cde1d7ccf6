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
import argparse, json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import measure  # noqa: E402  (bench/torch/measure.py: model construction)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--mode", choices=["ddp", "zero1"], required=True)
    for k in ("batch", "seq"):
        ap.add_argument("--" + k, dest=k, type=int)
    ap.add_argument("--precision")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--log-every", dest="log_every", type=int, default=1)
    a = ap.parse_args()
    rank = int(os.environ["LOCAL_RANK"])
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    a.optimizer = a.attention = a.zero_grad = a.grad_accum = a.image = a.dp = a.zero = a.checkpointing = None
    spec = measure.load_spec(a.spec, a)
    t = spec["training"]
    t["precision"] = a.precision or t["precision"]
    model, kind = measure.build(spec, torch)
    if t["precision"] == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    measure.enable_checkpointing(model, kind, t["checkpointing"], torch)
    model = DDP(model.to(torch.device("cuda", rank)), device_ids=[rank])
    if a.mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(rank)
    ids = torch.randint(0, spec["model"]["vocab"], (t["batch"], t["seq"]), device="cuda", generator=g)
    amp = t["precision"].startswith("amp")
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
