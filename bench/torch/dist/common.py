"""Shared pieces of the distributed ground-truth scripts (tp.py, pp.py, cp.py).

The model is a Llama written in plain PyTorch. Its operations follow
transformers' LlamaForCausalLM, which memplan's `llama` type simulates (RMSNorm
upcast to fp32 then multiplied by its weight, rotary embeddings with
rotate_half, SDPA causal attention with grouped key/value heads, a SwiGLU MLP,
an untied head whose logits are upcast to fp32 for the loss); its module names
follow torchtitan's Llama (tok_embeddings, layers.N.attention.wq/wk/wv/wo,
attention_norm, ffn_norm, feed_forward.w1/w2/w3, norm, output), so that
torchtitan's apply_tp plan applies to it verbatim.

Each script prints one JSON line per configuration on rank 0, with every
rank's peaks (torch.cuda.max_memory_allocated, max_memory_reserved, and the
device memory in use from cudaMemGetInfo), the versions, and the memplan
command line that describes the configuration.
"""
import json, math, os, socket, time

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

# MEMPLAN_ROPE_FP32=1: Attention multiplies the queries and keys by the fp32
# rotary tables, as transformers' Llama does under autocast (its tables in
# the hidden states' fp32) and torchtitan's complex rotation in fp32, where
# this harness has cast the tables to the queries' bf16 (thirtieth session,
# docs/parallelism.md §3.3.2: an experiment on the listed gaps).
ROPE_FP32 = os.environ.get("MEMPLAN_ROPE_FP32") == "1"


def llama_dims(spec_path, seq=None):
    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    m, t = spec["model"], spec.get("training", {})
    assert m["type"] == "llama", "the distributed scripts build Llama specs only"
    d = dict(layers=m["layers"], hidden=m["hidden"], heads=m["heads"], kv_heads=m.get("kv_heads", m["heads"]),
             inter=m["intermediate"], vocab=m["vocab"], seq=seq or t.get("seq", 2048), name=spec.get("name", spec_path),
             tied=bool(m.get("tied", False)))
    d["head_dim"] = m.get("head_dim", d["hidden"] // d["heads"])
    # A mixture of experts (experts: E, top_k: k, intermediate: each
    # expert's size): every block's MLP is transformers' own MoE block
    # (HFMoE). The attention here has no q/k norm.
    d["experts"], d["top_k"] = int(m.get("experts", 0)), int(m.get("top_k", 0))
    assert not (d["experts"] and m.get("qk_norm")), "the distributed scripts' attention has no q/k norm"
    return d


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.head_dim = d["head_dim"]
        self.wq = nn.Linear(d["hidden"], d["heads"] * self.head_dim, bias=False)
        self.wk = nn.Linear(d["hidden"], d["kv_heads"] * self.head_dim, bias=False)
        self.wv = nn.Linear(d["hidden"], d["kv_heads"] * self.head_dim, bias=False)
        self.wo = nn.Linear(d["heads"] * self.head_dim, d["hidden"], bias=False)
        # repeat_kv: expand the key/value heads before SDPA (torchtitan, and
        # transformers without enable_gqa) instead of SDPA's enable_gqa;
        # context parallelism's ring attention needs it.
        self.repeat_kv = False

    def forward(self, x, rope):
        b, s, _ = x.shape
        # -1: the local heads under tensor parallelism (column-sharded wq/wk/wv).
        q = self.wq(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        cos, sin = rope[0][:s], rope[1][:s]
        if not ROPE_FP32:
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        gqa = q.shape[1] != k.shape[1]
        if gqa and self.repeat_kv:
            n = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(n, dim=1), v.repeat_interleave(n, dim=1)
            gqa = False
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w1 = nn.Linear(d["hidden"], d["inter"], bias=False)
        self.w3 = nn.Linear(d["hidden"], d["inter"], bias=False)
        self.w2 = nn.Linear(d["inter"], d["hidden"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class HFMoE(nn.Module):
    """transformers' Qwen3MoeSparseMoeBlock (its top-k router and its fused
    experts), taken from a one-layer Qwen3-MoE that from_config builds, so
    that the experts run the implementation from_config picks (grouped_mm,
    docs/moe.md §1), which memplan simulates for a `llama` spec with
    experts. Built on whatever device is current (meta for the stages)."""

    def __init__(self, d):
        super().__init__()
        from transformers import AutoModelForCausalLM, Qwen3MoeConfig
        cfg = Qwen3MoeConfig(hidden_size=d["hidden"], intermediate_size=d["inter"], moe_intermediate_size=d["inter"],
                             num_experts=d["experts"], num_experts_per_tok=d["top_k"], norm_topk_prob=True,
                             num_hidden_layers=1, num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"],
                             head_dim=d["head_dim"], vocab_size=16, decoder_sparse_step=1, mlp_only_layers=[],
                             hidden_act="silu", tie_word_embeddings=False)
        hf = AutoModelForCausalLM.from_config(cfg)
        self.moe = hf.model.layers[0].mlp
        self.implementation = getattr(hf.config, "_experts_implementation", None)

    def forward(self, x):
        out = self.moe(x)
        return out[0] if isinstance(out, tuple) else out


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attention_norm = RMSNorm(d["hidden"])
        self.attention = Attention(d)
        self.ffn_norm = RMSNorm(d["hidden"])
        self.feed_forward = HFMoE(d) if d.get("experts") else FeedForward(d)

    def forward(self, x, rope):
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """A Llama whose layers can be removed (pipeline stages: tok_embeddings,
    norm and output set to None, layers kept by name as torchtitan does)."""

    def __init__(self, d, checkpointing=False):
        super().__init__()
        self.tok_embeddings = nn.Embedding(d["vocab"], d["hidden"])
        self.layers = nn.ModuleDict({str(i): Block(d) for i in range(d["layers"])})
        self.norm = RMSNorm(d["hidden"])
        self.output = nn.Linear(d["hidden"], d["vocab"], bias=False)
        if d["tied"]:
            self.output.weight = self.tok_embeddings.weight
        self.checkpointing = checkpointing
        # One buffer [2, seq, head_dim] so that context_parallel can shard it.
        self.register_buffer("rope", rope_tables(d), persistent=False)

    def forward(self, x):
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        rope = self.rope
        for layer in self.layers.values():
            if self.checkpointing:
                h = torch.utils.checkpoint.checkpoint(layer, h, rope, use_reentrant=False)
            else:
                h = layer(h, rope)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def rope_tables(d, device=None):
    """The rotary cos and sin tables, [2, seq, head_dim] (Llama's base 500000)."""
    inv = 1.0 / (500000.0 ** (torch.arange(0, d["head_dim"], 2, dtype=torch.float32, device=device) / d["head_dim"]))
    ang = torch.outer(torch.arange(d["seq"], dtype=torch.float32, device=device), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return torch.stack((ang.cos(), ang.sin()))


def loss_fn(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(0, 1))


def loss_backward(out, labels, parallel=False):
    """The training step's loss and backward after the forward (outside its
    autocast region, as tp.py and cp.py run it: memplan's
    --loss-outside-autocast), under loss_parallel when parallel. out is a
    one-element list holding the logits, popped here so that no caller's
    frame keeps them alive through the backward."""
    logits = out.pop()
    if parallel:
        from torch.distributed.tensor.parallel import loss_parallel
        with loss_parallel():
            loss = loss_fn(logits, labels)
            del logits
            loss.backward()
    else:
        loss = loss_fn(logits, labels)
        del logits
        loss.backward()


# MEMPLAN_FAKE_WORLD=N (with MEMPLAN_FAKE_RANK=r, default 0) runs one rank of
# an N-rank job in a single process on GPU 0, without torchrun, over torch's
# fake process group (as measure.py runs one data-parallel rank): its
# collectives move nothing and create no NCCL communicator, but every tensor
# the rank's program makes is made, at the shapes the layout gives it. Only
# that rank's peaks are reported (the record's config says fake_world and
# fake_rank); its device total holds no NCCL memory.
FAKE_WORLD = int(os.environ.get("MEMPLAN_FAKE_WORLD", "0"))
FAKE_RANK = int(os.environ.get("MEMPLAN_FAKE_RANK", "0"))


def setup():
    """torchrun's environment: the process group and this rank's device
    (or one rank of a fake group: FAKE_WORLD)."""
    import torch.distributed as dist
    if FAKE_WORLD:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        os.environ["LOCAL_RANK"] = "0"  # every fake rank on GPU 0 (DeviceMesh reads it)
        torch.cuda.set_device(0)
        dist.init_process_group("fake", store=FakeStore(), rank=FAKE_RANK, world_size=FAKE_WORLD)
    else:
        dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = 0 if FAKE_WORLD else int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    # MEMPLAN_SNAPSHOT=PREFIX records the allocator's history (Python stacks
    # only) and dumps PREFIX-rankN.pickle when the report is written;
    # MEMPLAN_SNAPSHOT_CONTEXT=none records no stacks, which slows the host
    # far less (a history with stacks can change what a race between the
    # host and NCCL's threads leaves alive). MEMPLAN_SNAPSHOT_STACKS=all
    # records C++ frames too (slower still), which name the kernel or op
    # behind an allocation that has no Python frame, as in backward
    # (bench/torch/snapstacks.py reads them).
    if os.environ.get("MEMPLAN_SNAPSHOT"):
        ctx = None if os.environ.get("MEMPLAN_SNAPSHOT_CONTEXT") == "none" else "all"
        torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("MEMPLAN_SNAPSHOT_ENTRIES", "100000")),
                                                 context=ctx, stacks=os.environ.get("MEMPLAN_SNAPSHOT_STACKS", "python"))
    return rank, world, local


def peaks(local):
    free, total = torch.cuda.mem_get_info(local)
    return {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
            "device_used": total - free}


def report(label, config, memplan, step_peaks, local, extra=None):
    """Gathers every rank's peaks and prints one JSON line on rank 0 (the
    label marked " [rope fp32]" under MEMPLAN_ROPE_FP32=1)."""
    import torch.distributed as dist
    if ROPE_FP32:
        label, config = label + " [rope fp32]", {**config, "rope_fp32": True}
    mine = {"rank": dist.get_rank(), "steps": step_peaks, **peaks(local)}
    if os.environ.get("MEMPLAN_SNAPSHOT"):
        torch.cuda.memory._dump_snapshot("%s-rank%d.pickle" % (os.environ["MEMPLAN_SNAPSHOT"], dist.get_rank()))
        torch.cuda.memory._record_memory_history(enabled=None)
    if FAKE_WORLD:
        # One rank of a fake group: its own peaks only, printed by it.
        everyone = [mine]
        label = "%s [fake %d rank %d]" % (label, FAKE_WORLD, FAKE_RANK)
        config = {**config, "fake_world": FAKE_WORLD, "fake_rank": FAKE_RANK}
    else:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    if dist.get_rank() == 0 or FAKE_WORLD:
        p = torch.cuda.get_device_properties(local)
        line = {"label": label, "ok": True, "config": config, "memplan": memplan, "ranks": everyone,
                "gpu": p.name, "gpu_total": p.total_memory, "torch": torch.__version__, "cuda": torch.version.cuda,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())), "host": socket.gethostname(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if extra:
            line.update(extra)
        print(json.dumps(line), flush=True)


def memplan_cmd(spec, batch, seq, **flags):
    """The memplan command line for a configuration, with issue 13's flags;
    a flag of None or False is left out, and so is grad_accum=1 (memplan's
    default: one micro-batch a step)."""
    parts = ["memplan estimate", spec, "--batch", str(batch), "--seq", str(seq), "--precision amp-bf16"]
    for k, v in flags.items():
        if v is None or v is False or (k == "grad_accum" and v == 1):
            continue
        k = "--" + k.replace("_", "-")
        parts.append(k if v is True else f"{k} {v}")
    return " ".join(parts)


def add_common_args(ap):
    ap.add_argument("spec", help="a memplan spec of type llama (model dimensions)")
    ap.add_argument("--seq", type=int)
    ap.add_argument("--batch", type=int, default=1, help="micro-batch per data-parallel rank")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--checkpointing", choices=["none", "every-block"], default="none")
    ap.add_argument("--label", default="")


def add_accum_arg(ap):
    """--grad-accum for the loops that are not pipelines (tp.py, cp.py; pp.py's
    micro-batches are its schedule's): N forward and backward passes per
    optimizer step, each reducing its gradients (no no_sync), as a plain
    accumulation loop does and memplan's --grad-accum simulates."""
    ap.add_argument("--grad-accum", dest="grad_accum", type=int, default=1,
                    help="micro-batches per optimizer step, their gradients accumulated")


def apply_tp_blocks(model, mesh, sp, ep=False):
    """torchtitan's per-block tensor-parallel plan (torchtitan/models/llama3/
    infra/parallelize.py) on every block of model: attention and MLP split
    by columns then rows, with sequence parallelism (sp) on the norms. A
    mixture of experts is split by columns (TPMoE), or, when its experts are
    split over ranks instead (ep, with sp), left to route the rank's
    sequence shard (SeqShardMoE)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    seq = Shard(1) if sp else Replicate()
    for block in model.layers.values():
        moe = isinstance(block.feed_forward, HFMoE)
        plan = {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
        }
        if not moe:
            plan.update({
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(output_layouts=seq),
            })
        if sp:
            plan.update({
                "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            })
            if not moe:
                plan["feed_forward"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(block, mesh, plan)
        if moe and ep:
            assert sp, "expert parallelism beside tensor parallelism needs sequence parallelism"
            block.feed_forward = SeqShardMoE(block.feed_forward)
        elif moe:
            block.feed_forward = TPMoE(block.feed_forward, mesh, sp)


def allreduce_router_grads(model, group):
    """The routers are replicated over the tensor-parallel ranks, whose
    gradients are partial sums there (TPMoE: every rank routes every token
    with its share of the experts; SeqShardMoE: each routes its own sequence
    shard): all-reduced in place, as DTensor reduces a Replicate parameter's
    gradient (no memory). Under FSDP the gradient is the rank's dp shard."""
    import torch.distributed as dist
    for m in model.modules():
        if type(m).__name__.endswith("TopKRouter") and m.weight.grad is not None:
            g = m.weight.grad
            dist.all_reduce(g.to_local() if hasattr(g, "to_local") else g, group=group)


class SeqShardMoE(nn.Module):
    """A mixture of experts beside tensor and sequence parallelism with its
    experts split over ranks (ep.py): torchtitan's plan with EP keeps the
    block's tokens sharded along the sequence, so each rank routes its own
    shard and the all-to-all exchanges the rows. The norm before it
    (SequenceParallel) hands it a DTensor; the block runs on its local
    shard and returns a local tensor, as the residual stream is."""

    def __init__(self, moe):
        super().__init__()
        self.inner = moe

    def forward(self, x):
        return self.inner(x.to_local() if hasattr(x, "to_local") else x)


class TPMoE(nn.Module):
    """Tensor parallelism of an HFMoE block without expert parallelism, as
    torchtitan's dense-family plan for experts does it (the router
    replicated and run on every token, each expert's gate/up columns and
    down rows split: Shard(1) and Shard(2) of the [E, ·, ·] weights): the
    block's input gathered along the sequence (sp) or taken as replicated,
    handed to transformers' block as a local tensor whose gradient is a
    partial sum, and the block's partial output reduce-scattered along the
    sequence (sp) or all-reduced, as RowwiseParallel's (the router's
    gradient: allreduce_router_grads). The experts' whole
    weights are replaced by the rank's shards here, gate_up then down (the
    gate and up halves each split, so that chunk(2) still pairs them).
    transformers' grouped_mm forward reads its sizes from the weights."""

    def __init__(self, moe, mesh, sp):
        super().__init__()
        self.inner, self.mesh, self.sp = moe, mesh, sp
        ex = moe.moe.experts
        t, r = mesh.size(), mesh.get_local_rank()
        gu = ex.gate_up_proj  # [E, 2I, h]: the gate's I rows, then the up's
        i = gu.shape[1] // 2
        assert i % t == 0, f"the experts' intermediate size {i} does not split over {t} ranks"
        c = i // t
        with torch.no_grad():
            local = torch.cat((gu[:, r * c:(r + 1) * c], gu[:, i + r * c:i + (r + 1) * c]), dim=1)
        ex.gate_up_proj = nn.Parameter(local)
        del gu, local
        dn = ex.down_proj  # [E, h, I]
        with torch.no_grad():
            local = dn[:, :, r * c:(r + 1) * c].contiguous()
        ex.down_proj = nn.Parameter(local)
        del dn, local

    def forward(self, x):
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
        seq = (Shard(1),) if self.sp else (Replicate(),)
        # Under sp the norm before the block (SequenceParallel) hands it a
        # DTensor; without sp a plain tensor.
        xd = x if isinstance(x, DTensor) else DTensor.from_local(x, self.mesh, seq, run_check=False)
        if self.sp:
            xd = xd.redistribute(placements=(Replicate(),))
        y = self.inner(xd.to_local(grad_placements=(Partial(),)))
        return DTensor.from_local(y, self.mesh, (Partial(),), run_check=False).redistribute(placements=seq).to_local()
