#!/usr/bin/env python3
"""Context parallelism with torch.distributed.tensor.experimental.context_parallel:
the sequence split over the ranks with load balancing (2·cp chunks), ring
attention with the default all-gather rotation of the keys and values;
optionally with tensor parallelism inside each context-parallel rank
(torchtitan's apply_tp, tp.py) and FSDP2 over dp·cp (torchtitan's
dp_shard_cp mesh), and for a spec with experts (moe-llama.yaml: transformers'
Qwen3-MoE block in each Llama block, common.HFMoE) expert parallelism over
the dp·cp ranks with FSDP (--ep).

    torchrun --standalone --nproc-per-node N bench/torch/dist/cp.py SPEC [--seq S] [--batch 1] [--grad-accum 1]
        [--tp 1] [--no-sp] [--loss-parallel] [--fsdp] [--dp 1] [--ep 1 --router zero|random]
        [--checkpointing none|every-block] [--rotate allgather|alltoall] [--steps 3]

With --ep (and --fsdp) the experts of every block are split over EP groups of
ep consecutive ranks of the flattened dp·cp ranks (bench/torch/dist/ep.py's
all-to-all dispatch of each rank's own tokens, as torchtitan borrows the
dp_shard and cp ranks for EP), on an (efsdp, ep) mesh of their own; each
block's experts are fully_shard-ed over efsdp (the dp·cp/ep ranks that hold
the same experts) before the block and the root over dp·cp.

The mesh is (dp, cp, tp), tp innermost as in torchtitan; cp = N / (dp·tp).
Without --fsdp the gradients of the parameters are averaged over the cp
ranks in place (all_reduce) and dp must be 1; with --fsdp every block and
the root are fully_shard-ed over the flattened dp·cp mesh after the model
is built on the GPU (and tensor-parallelised), so memplan is given
`--zero 3 --fsdp-init gpu` (and `--fsdp-init gpu` with --tp alone).

Key/value heads are repeated before SDPA (Attention.repeat_kv), as torchtitan
does, because the ring attention's kernels take no enable_gqa. Trains in
amp-bf16 with AdamW (foreach) and prints one JSON line on rank 0 with every
rank's peaks and the memplan command line.

A transformers config (a .json: the families memplan's
model.Model.RunsTransformersForward names, without sliding windows or
experts) runs through transformers' own model (hftp.build's pp.HFStage over
every layer, on the meta device, then materialised), with tensor parallelism
by hftp.py's plan (--tp) and FSDP2 over dp·cp (--fsdp) applied on the meta
device first, without --ep. Its forward makes the rotary tables for
positions 0 to s/cp − 1 on every rank: the wrong angles for the
load-balanced chunks but the same memory. Passing the chunks' positions (position_ids) would not do: their
jump between the two chunks reads as packed sequences to transformers'
masking (find_packed_sequence_indices), whose mask ring attention cannot
take. transformers' SDPA call passes enable_gqa, and no key/value head is
repeated.
"""
import argparse

import torch
from torch.distributed.device_mesh import init_device_mesh

import common


def memplan_cmd(a, cp, seq):
    """The memplan command line for a configuration (bench/torch/dist/predict.py
    maps grid lines to the same flags)."""
    sp = a.tp > 1 and not a.no_sp
    # The loss is computed after the autocast region ends: the cached bf16
    # weights are freed first.
    flags = dict(cp=cp, checkpointing=a.checkpointing, loss_outside_autocast=True,
                 grad_accum=a.grad_accum)
    if a.tp > 1:
        flags.update(tp=a.tp, sp=sp, loss_parallel=a.loss_parallel)
    if a.fsdp:
        flags.update(dp=a.dp if a.dp > 1 else None, zero=3)
    if a.fsdp or a.tp > 1:
        # The model is built whole on the GPU before it is split.
        flags.update(fsdp_init="gpu")
    if a.ep > 1:
        # Zeroed routers send one rank of each EP group every pair: skew ep.
        flags.update(ep=a.ep, ep_skew=a.ep if a.router == "zero" else None)
    return common.memplan_cmd(a.spec, a.batch, seq, **flags)


def parser():
    ap = argparse.ArgumentParser()
    common.add_common_args(ap)
    common.add_accum_arg(ap)
    ap.add_argument("--rotate", choices=["allgather", "alltoall"], default="allgather")
    ap.add_argument("--tp", type=int, default=1, help="tensor parallelism inside each cp rank (torchtitan's plan)")
    ap.add_argument("--no-sp", action="store_true", help="with --tp: without sequence parallelism")
    ap.add_argument("--loss-parallel", action="store_true", help="with --tp: the loss on vocabulary shards")
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 over the flattened dp·cp mesh")
    ap.add_argument("--dp", type=int, default=1, help="with --fsdp: data-parallel ranks (FSDP over dp·cp)")
    ap.add_argument("--ep", type=int, default=1, help="with --fsdp and a spec with experts: expert parallelism over dp·cp")
    ap.add_argument("--router", choices=["zero", "random"], default="zero",
                    help="with --ep: ep.py's routers (zero: every pair to one rank of the group, the skew ep)")
    return ap


def main():
    a = parser().parse_args()
    rank, world, local = common.setup()
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    assert a.dp == 1 or a.fsdp, "dp > 1 needs --fsdp (torchtitan shards over dp·cp)"
    assert world % (a.dp * a.tp) == 0, f"world {world} is not divisible by dp {a.dp} × tp {a.tp}"
    cp = world // (a.dp * a.tp)
    assert cp > 1, "no context parallelism left: world = dp × tp"
    hf = a.spec.endswith(".json")
    if hf:
        assert a.ep == 1, "a transformers config runs context parallelism without --ep"
        return main_hf(a, cp, world, local, context_parallel, set_rotate_method)
    d = common.llama_dims(a.spec, a.seq)
    assert d["seq"] % (2 * cp * a.tp) == 0, "load-balanced CP needs the sequence divisible by 2·cp·tp"
    set_rotate_method(a.rotate)
    # Only the dimensions larger than one (cp always), so that a run of
    # context parallelism alone has the 1-D mesh the first cp.py runs had.
    dims = [(n, name) for n, name in ((a.dp, "dp"), (cp, "cp"), (a.tp, "tp")) if n > 1 or name == "cp"]
    mesh = init_device_mesh("cuda", tuple(n for n, _ in dims), mesh_dim_names=tuple(name for _, name in dims))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = common.Llama(d, checkpointing=a.checkpointing == "every-block")
    for block in model.layers.values():
        block.attention.repeat_kv = True
    sp = a.tp > 1 and not a.no_sp
    if a.tp > 1:
        import tp as tpmod
        tpmod.apply_tp(model, mesh["tp"], sp, a.loss_parallel)
        if d["tied"]:
            model.output.weight = model.tok_embeddings.weight
    logs, efsdp = [], None
    if a.ep > 1:
        import ep
        assert a.fsdp and a.tp == 1 and d["experts"] and (a.dp * cp) % a.ep == 0, \
            "--ep needs --fsdp, no --tp, a spec with experts and ep dividing dp·cp"
        emesh = init_device_mesh("cuda", (a.dp * cp // a.ep, a.ep), mesh_dim_names=("efsdp", "ep"))
        efsdp = emesh["efsdp"]
        logs = ep.apply(model, a.ep, a.router, emesh["ep"].get_group())
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        shard = mesh["dp", "cp"]._flatten("dp_cp") if a.dp > 1 else mesh["cp"]
        for block in model.layers.values():
            if efsdp is not None:
                ep.shard_experts(block, efsdp)
            fully_shard(block, mesh=shard)
        fully_shard(model, mesh=shard)
    from torch.distributed.tensor import DTensor
    groups = [[p for p in model.parameters() if isinstance(p, DTensor)],
              [p for p in model.parameters() if not isinstance(p, DTensor)]]
    opt = torch.optim.AdamW([{"params": g} for g in groups if g], lr=1e-4, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(mesh["dp"].get_local_rank() if a.dp > 1 else 0)
    cp_group = mesh["cp"].get_group()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = []
    for _ in range(a.steps):
        for _ in range(a.grad_accum):
            inp = torch.randint(0, d["vocab"], (a.batch, d["seq"]), device="cuda", generator=g)
            labels = torch.randint(0, d["vocab"], (a.batch, d["seq"]), device="cuda", generator=g)
            with context_parallel(mesh["cp"], buffers=[inp, labels, model.rope], buffer_seq_dims=[1, 1, 1],
                                  no_restore_buffers={inp, labels}):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = [model(inp)]
                common.loss_backward(out, labels, a.loss_parallel)
        if not a.fsdp:
            # The gradients of the replicated parameters, averaged over the
            # CP ranks as FSDP over dp·cp would reduce them.
            for p in model.parameters():
                grad = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                torch.distributed.all_reduce(grad, op=torch.distributed.ReduceOp.AVG, group=cp_group)
            # Unbound, or the last parameter's gradient (an untied head's)
            # outlives zero_grad into the next step (forty-fifth session:
            # 250 MiB at TinyLlama's peak, bench/results/2026-11-29-h200-fake-45).
            grad = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        if a.ep > 1 and a.router == "zero":
            ep.zero_routers(model)  # the tie kept, as train.py does
        torch.cuda.synchronize()
        steps.append(common.peaks(local))
    config = {"script": "cp", "spec": a.spec, "cp": cp, "rotate": a.rotate, "batch": a.batch, "grad_accum": a.grad_accum, "seq": d["seq"],
              "checkpointing": a.checkpointing, "world": world, "tp": a.tp, "sp": sp,
              "loss_parallel": a.loss_parallel, "dp": a.dp, "fsdp": a.fsdp,
              "ep": a.ep, "router": a.router if a.ep > 1 else None,
              "recv_rows_max": max(((r, n) for _, r, n in logs), default=None)}
    cmd = memplan_cmd(a, cp, d["seq"])
    common.report(a.label, config, cmd, steps, local)


def main_hf(a, cp, world, local, context_parallel, set_rotate_method):
    """Context parallelism of transformers' own model (the module
    docstring): the loop of main, with --tp tensor parallelism inside each
    cp rank by hftp.py's plan (tp.py's hf_main: sequence parallelism unless
    --no-sp, the residual stream a DTensor split along the rank's part of
    the sequence), and with --fsdp every decoder layer and the root
    fully_shard-ed over the dp·cp ranks, all on the meta device before the
    model is materialised (torchtitan's order, and accelerate's FSDP2 over
    dp_shard·cp), so each rank allocates its shards only: memplan's
    --fsdp-init meta (and --zero 3)."""
    import hftp
    from torch.distributed.tensor import DTensor
    set_rotate_method(a.rotate)
    dims = [(n, name) for n, name in ((a.dp, "dp"), (cp, "cp"), (a.tp, "tp")) if n > 1 or name == "cp"]
    mesh = init_device_mesh("cuda", tuple(n for n, _ in dims), mesh_dim_names=tuple(name for _, name in dims))
    torch.manual_seed(0)
    model, config, d = hftp.build(a.spec, a.checkpointing == "every-block")
    d["seq"] = a.seq
    assert d["seq"] % (2 * cp) == 0, "load-balanced CP needs the sequence divisible by 2·cp"
    sp = a.tp > 1 and not a.no_sp
    if a.tp > 1:
        hftp.apply(model, mesh["tp"], a.loss_parallel, sp)
        if d["tied"]:
            # Both sharded by vocabulary on the tp mesh: tied again, as
            # tp.py's hf_main does.
            model.lm_head.weight = model.model.embed_tokens.weight
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        shard = mesh["dp", "cp"]._flatten("dp_cp") if a.dp > 1 else mesh["cp"]
        for layer in model.model.layers:
            fully_shard(layer, mesh=shard)
        fully_shard(model, mesh=shard)
    hftp.materialise(model, config)
    if d["tied"] and (a.fsdp or a.tp > 1):
        # to_empty swaps a DTensor parameter in place (swap_tensors), so the
        # head and the embedding still share theirs.
        assert model.lm_head.weight is model.model.embed_tokens.weight, "the tie did not survive to_empty"
    elif d["tied"]:
        # to_empty gave the embedding and the head a Parameter each (a meta
        # tensor's data cannot be swapped for a CUDA one in place): tied
        # again, as from_pretrained leaves them, and the head's storage
        # released, as from_pretrained never makes it (the first runs
        # trained both: bench/results/2026-11-28-h100x4-cp-families/untied.jsonl).
        model.lm_head.weight = model.model.embed_tokens.weight
        torch.cuda.empty_cache()
    if a.tp > 1:
        # tp.py's groups: the DTensors, then the plain parameters (foreach
        # AdamW cannot mix them in one call).
        groups = [[p for p in model.parameters() if isinstance(p, DTensor)],
                  [p for p in model.parameters() if not isinstance(p, DTensor)]]
        opt = torch.optim.AdamW([{"params": g} for g in groups if g], lr=1e-4, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    g = torch.Generator(device="cuda").manual_seed(mesh["dp"].get_local_rank() if a.dp > 1 else 0)
    cp_group = mesh["cp"].get_group()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = []
    for _ in range(a.steps):
        for _ in range(a.grad_accum):
            inp = torch.randint(0, d["vocab"], (a.batch, d["seq"]), device="cuda", generator=g)
            labels = torch.randint(0, d["vocab"], (a.batch, d["seq"]), device="cuda", generator=g)
            with context_parallel(mesh["cp"], buffers=[inp, labels], buffer_seq_dims=[1, 1],
                                  no_restore_buffers={inp, labels}):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = [model(inp)]
                common.loss_backward(out, labels, a.loss_parallel)
        if a.tp > 1:
            hftp.reduce_partial_grads(model, mesh["tp"].get_group())
        if not a.fsdp:
            for p in model.parameters():
                if p.grad is not None:
                    grad = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                    torch.distributed.all_reduce(grad, op=torch.distributed.ReduceOp.AVG, group=cp_group)
            grad = None  # as main's: no gradient outlives zero_grad
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps.append(common.peaks(local))
    meta = a.fsdp or a.tp > 1
    config_out = {"script": "cp", "spec": a.spec, "cp": cp, "rotate": a.rotate, "batch": a.batch, "grad_accum": a.grad_accum, "seq": d["seq"],
                  "checkpointing": a.checkpointing, "world": world, "tp": a.tp, "sp": sp,
                  "loss_parallel": a.loss_parallel, "dp": a.dp, "fsdp": a.fsdp, "meta": meta, "ep": 1, "router": None,
                  "recv_rows_max": None, "tied": d["tied"]}
    flags = dict(fsdp_init="meta") if meta else {}
    if a.tp > 1:
        flags.update(tp=a.tp, sp=sp, loss_parallel=a.loss_parallel)
    if a.fsdp:
        flags.update(dp=a.dp if a.dp > 1 else None, zero=3, fsdp_root="keep")
    cmd = common.memplan_cmd("--hf " + a.spec, a.batch, d["seq"], cp=cp, checkpointing=a.checkpointing,
                             grad_accum=a.grad_accum,
                             loss_outside_autocast=True, **flags)
    common.report(a.label, config_out, cmd, steps, local)


if __name__ == "__main__":
    main()
