#!/usr/bin/env python3
"""Tensor (and sequence) parallelism with PyTorch's DTensor plans, as
torchtitan's apply_tp applies them to Llama; FSDP2 over the data-parallel
dimension when --dp > 1 (a 2-D mesh, 4+ GPUs), or with --mode ddp|zero1
DistributedDataParallel over the tensor-parallel shards
(_pre_dp_module_transform), with AdamW or ZeroRedundancyOptimizer.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/tp.py SPEC --tp 2 [--no-sp] [--loss-parallel]
        [--dp 1 [--mode fsdp|ddp|zero1]] [--batch 1] [--grad-accum 1] [--seq S] [--checkpointing none|every-block] [--steps 3]
        [--ep 1 --router zero|random] [--meta]

The model is built whole on the GPU and then split (memplan's --fsdp-init
gpu), or with --meta built, split and sharded on the meta device and then
materialised and drawn, as torchtitan does (--fsdp-init meta, memplan's
default under tensor parallelism).

With a spec with experts (moe-llama.yaml) each block's experts are split by
columns over tp (common.TPMoE), or with --ep over EP groups of the dp·tp
ranks (ep.py, torchtitan's sparse mesh; sequence parallelism required, each
rank routing its sequence shard; fully_shard over efsdp when dp > 1).

With a transformers config (a .json: GPT-OSS, GLM-4 MoE, DeepSeek) the model
is transformers' own, run through its forward and split by hftp.py's plan,
with or without sequence parallelism (--meta required); --ep as above, with
sequence parallelism (hftp.SeqShardMoE).

Trains in amp-bf16 (autocast over fp32 weights) with AdamW (foreach), loss
from fp32 logits, and prints one JSON line on rank 0 (common.report) with every
rank's peaks and the memplan command line for the configuration.
"""
import argparse

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

import common


def apply_tp(model, mesh, sp, lp, ep=False):
    """torchtitan's apply_tp (torchtitan/models/llama3/infra/parallelize.py)."""
    seq = Shard(1) if sp else Replicate()
    root = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "output": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1) if lp else Replicate(),
                                  use_local_output=not lp),
    }
    if sp:
        root["norm"] = SequenceParallel()
    parallelize_module(model, mesh, root)
    common.apply_tp_blocks(model, mesh, sp, ep)


def reshard_kw(a):
    """fully_shard's reshard_after_forward for a block: --reshard N, or torch's default."""
    assert not a.reshard or a.ep == 1, "--reshard is not run with --ep"
    return {"reshard_after_forward": a.reshard} if a.reshard else {}


def main():
    ap = argparse.ArgumentParser()
    common.add_common_args(ap)
    common.add_accum_arg(ap)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--dp", type=int, default=1, help="data parallelism over this many ranks (--mode)")
    ap.add_argument("--mode", choices=["fsdp", "ddp", "zero1"], default="fsdp",
                    help="with --dp: FSDP2 (fully_shard), or DDP over the tensor-parallel shards as PyTorch composes "
                         "them (_pre_dp_module_transform: the parameters local tensors for DDP), with AdamW or "
                         "ZeroRedundancyOptimizer over the dp ranks (memplan's --zero 0 and 1)")
    ap.add_argument("--no-sp", action="store_true", help="tensor parallelism without sequence parallelism")
    ap.add_argument("--reshard", type=int, default=0,
                    help="with --dp and FSDP: the blocks' reshard_after_forward=N (N dividing dp: each block keeps "
                         "1/N of its parameters from its forward to its backward); the root is left to torch. "
                         "torch 2.11 refuses it beside tensor parallelism (held-out set 95)")
    ap.add_argument("--loss-parallel", action="store_true")
    ap.add_argument("--ep", type=int, default=1,
                    help="a spec with experts: expert parallelism over dp·tp (ep.py; with sp, FSDP when dp > 1)")
    ap.add_argument("--router", choices=["zero", "random"], default="zero",
                    help="with --ep: ep.py's routers (zero: every pair to one rank of the group, the skew ep)")
    ap.add_argument("--meta", action="store_true",
                    help="build the model on the meta device, split and shard it there, then materialise it (to_empty) "
                         "and draw its weights, as torchtitan does (memplan's --fsdp-init meta); by default it is built "
                         "whole on the GPU first (--fsdp-init gpu)")
    a = ap.parse_args()
    rank, world, local = common.setup()
    assert a.tp * a.dp == world, f"tp {a.tp} × dp {a.dp} != world {world}"
    if a.spec.endswith(".json"):
        return hf_main(a, world, local)
    d = common.llama_dims(a.spec, a.seq)
    sp = not a.no_sp
    mesh = init_device_mesh("cuda", (a.dp, a.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    with torch.device("meta" if a.meta else "cuda"):
        model = common.Llama(d, checkpointing=a.checkpointing == "every-block")
    apply_tp(model, mesh["tp"], sp, a.loss_parallel, a.ep > 1)
    logs, efsdp = [], None
    if a.ep > 1:
        # torchtitan's sparse mesh: EP groups of ep consecutive ranks of
        # the dp·tp ranks (tp innermost), efsdp the ranks that hold the
        # same experts.
        import ep
        assert d["experts"] and world % a.ep == 0 and sp, "--ep needs a spec with experts, ep dividing dp·tp and sp"
        emesh = ep.mesh(a.ep)
        efsdp = emesh["efsdp"]
        logs = ep.apply(model, a.ep, "random" if a.meta else a.router, emesh["ep"].get_group())
    if d["tied"]:
        # Both are sharded by vocabulary (Shard(0)) on the tp mesh: tie the
        # DTensor parameters again, as the spec says.
        model.output.weight = model.tok_embeddings.weight
    if a.dp > 1 and a.mode != "fsdp":
        assert not a.meta and a.ep == 1, "--mode ddp|zero1 builds on the GPU, without --ep"
        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
        from torch.nn.parallel import DistributedDataParallel as DDP
        _pre_dp_module_transform(model)
        model = DDP(model, device_ids=[local], process_group=mesh["dp"].get_group())
    elif a.dp > 1:
        from torch.distributed.fsdp import fully_shard
        for block in model.layers.values():
            if efsdp is not None:
                ep.shard_experts(block, efsdp)
            fully_shard(block, mesh=mesh["dp"], **reshard_kw(a))
        fully_shard(model, mesh=mesh["dp"])
    if a.meta:
        # torchtitan's order: parallelised on meta, then materialised and
        # drawn on the GPU (DTensor's random ops), the rotary tables filled.
        model.to_empty(device="cuda")
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.02)
            model.rope.copy_(common.rope_tables(d, "cuda"))
        if a.ep > 1 and a.router == "zero":
            ep.zero_routers(model)
    def after_backward():
        if d["experts"]:
            common.allreduce_router_grads(model, mesh["tp"].get_group())

    def after_step():
        if a.ep > 1 and a.router == "zero":
            ep.zero_routers(model)

    steps = train(model, mesh, d["vocab"], d["seq"], a, local, after_backward, after_step)
    config = {"script": "tp", "spec": a.spec, "tp": a.tp, "dp": a.dp, "sp": sp, "loss_parallel": a.loss_parallel,
              "meta": a.meta, "mode": a.mode if a.dp > 1 else None,
              "batch": a.batch, "grad_accum": a.grad_accum, "seq": d["seq"], "checkpointing": a.checkpointing, "world": world,
              "ep": a.ep, "router": a.router if a.ep > 1 else None, "reshard": a.reshard or None,
              "recv_rows_max": max(((r, n) for _, r, n in logs), default=None)}
    # The loss is computed after the autocast region ends (memplan's
    # --loss-outside-autocast): the cached bf16 weights are freed first.
    # fully_shard(model) leaves the root's reshard_after_forward to torch,
    # which keeps it unsharded until the backward (--fsdp-root keep).
    zero = {"fsdp": 3, "ddp": 0, "zero1": 1}[a.mode] if a.dp > 1 else None
    cmd = common.memplan_cmd(a.spec, a.batch, d["seq"], tp=a.tp, sp=sp, loss_parallel=a.loss_parallel,
                             dp=a.dp if a.dp > 1 else None, zero=zero,
                             fsdp_root="keep" if zero == 3 else None, checkpointing=a.checkpointing,
                             reshard_after_forward=a.reshard if zero == 3 and 1 < a.reshard < a.dp else None,
                             grad_accum=a.grad_accum,
                             loss_outside_autocast=True, fsdp_init="meta" if a.meta else "gpu",
                             ep=a.ep if a.ep > 1 else None,
                             ep_skew=a.ep if a.ep > 1 and a.router == "zero" else None)
    common.report(a.label, config, cmd, steps, local)


def train(model, mesh, vocab, seq, a, local, after_backward, after_step):
    """a.steps training steps on random tokens (each dp rank its own), every
    rank's peaks after each. Without sequence parallelism the norms (and a
    mixture of experts' local shards) keep plain-tensor parameters; foreach
    AdamW cannot mix them with DTensors in one call, so they get a parameter
    group of their own after the DTensors' (one foreach call per group)."""
    from torch.distributed.tensor import DTensor
    groups = [[p for p in model.parameters() if isinstance(p, DTensor)],
              [p for p in model.parameters() if not isinstance(p, DTensor)]]
    if a.mode == "zero1" and a.dp > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(list(model.parameters()), optimizer_class=torch.optim.AdamW,
                                      process_group=mesh["dp"].get_group(), lr=1e-4, foreach=True)
    else:
        opt = torch.optim.AdamW([{"params": g} for g in groups if g], lr=1e-4, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(mesh["dp"].get_local_rank())
    inp = torch.randint(0, vocab, (a.batch, seq), device="cuda", generator=g)
    labels = torch.randint(0, vocab, (a.batch, seq), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = []
    for _ in range(a.steps):
        for _ in range(a.grad_accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = [model(inp)]
            common.loss_backward(out, labels, a.loss_parallel)
            after_backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        after_step()
        torch.cuda.synchronize()
        steps.append(common.peaks(local))
    return steps


def hf_main(a, world, local):
    """A transformers config (GPT-OSS, GLM-4 MoE, DeepSeek) through
    transformers' own forward, split by hftp.py's plan (with sequence
    parallelism unless --no-sp), built on meta; FSDP2 over dp as main does,
    or (--mode ddp|zero1) DDP over the materialised tensor-parallel shards
    (_pre_dp_module_transform, as main; thirty-ninth session)."""
    ddp = a.dp > 1 and a.mode != "fsdp"
    assert not ddp or a.ep == 1, "--mode ddp|zero1 of a transformers config takes no --ep"
    import hftp
    sp = not a.no_sp
    assert a.meta and (a.ep == 1 or sp), "a transformers config runs with --meta, and --ep with sp (hftp.py)"
    mesh = init_device_mesh("cuda", (a.dp, a.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model, config, d = hftp.build(a.spec, a.checkpointing == "every-block")
    hftp.apply(model, mesh["tp"], a.loss_parallel, sp, a.ep > 1)
    if d["tied"]:
        # Both sharded by vocabulary (Shard(0)) on the tp mesh: tied again,
        # as main does for a spec.
        model.lm_head.weight = model.model.embed_tokens.weight
    logs, efsdp = [], None
    if a.ep > 1:
        # As main: EP groups of ep consecutive ranks of the dp·tp ranks.
        import ep
        assert d["experts"] and world % a.ep == 0, "--ep needs experts and ep dividing dp·tp"
        emesh = ep.mesh(a.ep)
        efsdp = emesh["efsdp"]
        logs = ep.apply(model, a.ep, "random", emesh["ep"].get_group())
    if a.dp > 1 and not ddp:
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            if efsdp is not None:
                ep.shard_experts(layer, efsdp)
            fully_shard(layer, mesh=mesh["dp"], **reshard_kw(a))
        fully_shard(model, mesh=mesh["dp"])
    hftp.materialise(model, config)
    inner, partial = model, None
    if ddp:
        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
        from torch.nn.parallel import DistributedDataParallel as DDP
        partial = set(map(id, hftp.partial_params(model)))
        _pre_dp_module_transform(model)
        model = DDP(model, device_ids=[local], process_group=mesh["dp"].get_group())
    zero = a.ep > 1 and a.router == "zero"
    if zero:
        ep.zero_routers(inner)
    seq = a.seq
    steps = train(model, mesh, d["vocab"], seq, a, local,
                  lambda: hftp.reduce_partial_grads(inner, mesh["tp"].get_group(), partial),
                  lambda: ep.zero_routers(inner) if zero else None)
    config = {"script": "tp", "spec": a.spec, "tp": a.tp, "dp": a.dp, "sp": sp, "loss_parallel": a.loss_parallel,
              "meta": True, "mode": a.mode if a.dp > 1 else None,
              "batch": a.batch, "grad_accum": a.grad_accum, "seq": seq, "checkpointing": a.checkpointing, "world": world,
              "ep": a.ep, "router": a.router if a.ep > 1 else None, "reshard": a.reshard or None,
              "recv_rows_max": max(((r, n) for _, r, n in logs), default=None)}
    dpzero = {"fsdp": 3, "ddp": 0, "zero1": 1}[a.mode] if a.dp > 1 else None
    cmd = common.memplan_cmd("--hf " + a.spec, a.batch, seq, tp=a.tp, sp=sp, loss_parallel=a.loss_parallel,
                             dp=a.dp if a.dp > 1 else None, zero=dpzero,
                             fsdp_root="keep" if dpzero == 3 else None, checkpointing=a.checkpointing,
                             reshard_after_forward=a.reshard if dpzero == 3 and 1 < a.reshard < a.dp else None,
                             grad_accum=a.grad_accum,
                             loss_outside_autocast=True, fsdp_init="meta", ep=a.ep if a.ep > 1 else None,
                             ep_skew=a.ep if zero else None)
    common.report(a.label, config, cmd, steps, local)


if __name__ == "__main__":
    main()
