#!/usr/bin/env python3
"""Pipeline parallelism with torch.distributed.pipelining: one stage per rank,
the blocks split as torchtitan's generate_llm_fqn_per_model_part splits them
(the embedding and the head count as one layer each; memplan's
planner.StageLayers), GPipe or 1F1B.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/pp.py SPEC --schedule 1f1b --microbatches 8
        [--batch 1] [--seq S] [--checkpointing none|every-block] [--steps 3]

--batch is the micro-batch; a step pipelines --microbatches of them. Trains in
amp-bf16 with AdamW (foreach; the memplan command line says so, since specs may
name another implementation) and prints one JSON line on rank 0 with every
rank's (stage's) peaks and the memplan command line; rank r runs stage r, whose
figures memplan gives as estimate's pipeline.kinds (first and last stage).
"""
import argparse

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

import common


def stage_layers(layers, stages):
    """torchtitan's split with input and output weights of 1 (planner.StageLayers)."""
    if stages == 1:
        return [layers]
    eff = layers + 2
    per, extra = divmod(eff, stages)
    if per < 1:
        raise ValueError(f"{stages} stages for {layers} layers")
    out, left = [], layers
    for i in range(stages):
        n = per + (1 if i < extra else 0) - (1 if i in (0, stages - 1) else 0)
        n = min(n, left)
        out.append(n)
        left -= n
    return out


def main():
    ap = argparse.ArgumentParser()
    common.add_common_args(ap)
    ap.add_argument("--schedule", choices=["gpipe", "1f1b"], required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    a = ap.parse_args()
    rank, world, local = common.setup()
    d = common.llama_dims(a.spec, a.seq)
    if d["tied"]:
        raise SystemExit(f"{a.spec}: tied embeddings cannot be split over pipeline stages (use an untied spec)")
    split = stage_layers(d["layers"], world)
    first = sum(split[:rank])
    keep = {str(i) for i in range(first, first + split[rank])}
    torch.manual_seed(0)
    with torch.device("meta"):
        model = common.Llama(d, checkpointing=a.checkpointing == "every-block")
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if rank != 0:
        model.tok_embeddings = None
    if rank != world - 1:
        model.norm, model.output = None, None
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
        inv = 1.0 / (500000.0 ** (torch.arange(0, d["head_dim"], 2, dtype=torch.float32, device="cuda") / d["head_dim"]))
        ang = torch.outer(torch.arange(d["seq"], dtype=torch.float32, device="cuda"), inv)
        ang = torch.cat((ang, ang), dim=-1)
        model.rope.copy_(torch.stack((ang.cos(), ang.sin())))
    stage = PipelineStage(model, rank, world, torch.device("cuda", local))
    cls = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
    sched = cls(stage, n_microbatches=a.microbatches, loss_fn=common.loss_fn)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    n = a.batch * a.microbatches
    g = torch.Generator(device="cuda").manual_seed(0)
    inp = torch.randint(0, d["vocab"], (n, d["seq"]), device="cuda", generator=g)
    labels = torch.randint(0, d["vocab"], (n, d["seq"]), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = []
    for _ in range(a.steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if rank == 0:
                sched.step(inp)
            elif rank == world - 1:
                sched.step(target=labels, losses=[])
            else:
                sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps.append(common.peaks(local))
    config = {"script": "pp", "spec": a.spec, "pp": world, "schedule": a.schedule, "microbatches": a.microbatches,
              "stage_layers": split, "batch": a.batch, "seq": d["seq"], "checkpointing": a.checkpointing, "world": world}
    cmd = common.memplan_cmd(a.spec, a.batch, d["seq"], pp=world, pp_schedule=a.schedule, microbatches=a.microbatches,
                             checkpointing=a.checkpointing, optimizer="adamw-foreach")
    common.report(a.label, config, cmd, steps, local)


if __name__ == "__main__":
    main()
