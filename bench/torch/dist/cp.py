#!/usr/bin/env python3
"""Context parallelism with torch.distributed.tensor.experimental.context_parallel:
the sequence split over the ranks with load balancing (2·cp chunks), ring
attention with the default all-gather rotation of the keys and values.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/cp.py SPEC [--seq S] [--batch 1]
        [--checkpointing none|every-block] [--rotate allgather|alltoall] [--steps 3]

Key/value heads are repeated before SDPA (Attention.repeat_kv), as torchtitan
does, because the ring attention's kernels take no enable_gqa. Trains in
amp-bf16 with AdamW (foreach) and prints one JSON line on rank 0 with every
rank's peaks and the memplan command line.
"""
import argparse

import torch
from torch.distributed.device_mesh import init_device_mesh

import common


def main():
    ap = argparse.ArgumentParser()
    common.add_common_args(ap)
    ap.add_argument("--rotate", choices=["allgather", "alltoall"], default="allgather")
    a = ap.parse_args()
    rank, world, local = common.setup()
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    d = common.llama_dims(a.spec, a.seq)
    assert d["seq"] % (2 * world) == 0, "load-balanced CP needs the sequence divisible by 2·cp"
    set_rotate_method(a.rotate)
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = common.Llama(d, checkpointing=a.checkpointing == "every-block")
    for block in model.layers.values():
        block.attention.repeat_kv = True
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = []
    for _ in range(a.steps):
        inp = torch.randint(0, d["vocab"], (a.batch, d["seq"]), device="cuda", generator=g)
        labels = torch.randint(0, d["vocab"], (a.batch, d["seq"]), device="cuda", generator=g)
        with context_parallel(mesh, buffers=[inp, labels, model.rope], buffer_seq_dims=[1, 1, 1],
                              no_restore_buffers={inp, labels}):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(inp)
            loss = common.loss_fn(logits, labels)
            del logits
            loss.backward()
            del loss
        # The gradients of the replicated parameters, averaged over the CP
        # ranks as FSDP over dp·cp would reduce them.
        for p in model.parameters():
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.AVG)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps.append(common.peaks(local))
    config = {"script": "cp", "spec": a.spec, "cp": world, "rotate": a.rotate, "batch": a.batch, "seq": d["seq"],
              "checkpointing": a.checkpointing, "world": world}
    cmd = common.memplan_cmd(a.spec, a.batch, d["seq"], cp=world, checkpointing=a.checkpointing)
    common.report(a.label, config, cmd, steps, local)


if __name__ == "__main__":
    main()
