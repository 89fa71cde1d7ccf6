#!/usr/bin/env python3
"""Pipeline parallelism with torch.distributed.pipelining, the blocks split as
torchtitan's generate_llm_fqn_per_model_part splits them (the embedding and the
head count as one layer each; memplan's model.StageLayers): one stage per rank
(GPipe, 1F1B), or --stages-per-rank stages per rank round robin (interleaved 1F1B:
rank r holds stages r, r+pp, ...); optionally tensor parallelism inside each
stage (--tp, a pp × tp mesh, torchtitan's plan as tp.py applies it).

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/pp.py SPEC --schedule 1f1b --microbatches 8
        [--batch 1] [--seq S] [--checkpointing none|every-block] [--steps 3]
    torchrun --standalone --nproc-per-node 2 bench/torch/dist/pp.py SPEC --schedule interleaved --stages-per-rank 2 --microbatches 4
    torchrun --standalone --nproc-per-node 4 bench/torch/dist/pp.py SPEC --schedule 1f1b --microbatches 4 --tp 2 [--no-sp]
    torchrun --standalone --nproc-per-node 4 bench/torch/dist/pp.py SPEC --schedule 1f1b --microbatches 4 --dp 2 --mode ddp|zero1|fsdp
        [--step-pause 0.2]
    torchrun --standalone --nproc-per-node 4 bench/torch/dist/pp.py bench/torch/dist/moe-llama.yaml --schedule 1f1b --microbatches 4 --dp 2 --ep 2 --mode ddp|fsdp
    torchrun --standalone --nproc-per-node 4 bench/torch/dist/pp.py bench/torch/dist/moe-llama.yaml --schedule 1f1b --microbatches 4 --tp 2 [--ep 2]

A spec with tied embedding and head weights (tied: true) is split as
Megatron-LM splits it (torchtitan refuses it): the first stage holds the
embedding, the last a head whose weight is its own copy, set equal at the
start and kept equal by an all-reduce of the two gradients after each
backward over the embedding group (the first and last stages' ranks of
each data- and tensor-parallel coordinate, a process group of its own;
memplan's model.stageSlice and estimate's pipelineNCCL).

A spec with experts (moe-llama.yaml) builds each block's MLP as transformers'
Qwen3-MoE block (common.HFMoE); --ep splits each stage's experts over its
replicas with ep.py (its all-to-all dispatch), under DDP (on the dp group,
or with --ep-mesh on a group of its own) or, on a (pp, efsdp, ep) mesh,
FSDP2 with the experts sharded first. With --tp each stage's MoE blocks are
split by columns (common.TPMoE), or with --ep beside it over EP groups of the
stage's dp·tp ranks, each rank routing its sequence shard (common.SeqShardMoE;
ep.py applied on the meta device, before the stage is materialised; FSDP2
over dp with the experts over efsdp when --dp > 1). The routers' gradients
are all-reduced over tp.

A transformers config (a .json, as memplan estimate --hf reads it: DeepSeek-V2
and V3, and GPT-OSS in eager attention) is pipelined through transformers' own
model: each stage is the base model built on meta with only its share of the
decoder layers (their global indexes kept, so DeepSeek's dense first layers stay
dense, the others' replaced by a pass-through so that every layer keeps its
place: GPT-OSS's forward still makes both masks and hands each layer its own),
the embedding on the first stage, the final norm and the head on the last; its
forward is the base model's (rotary tables made in every stage's forward, the
key/value cache kept by the forward unless checkpointing turns it off), as
memplan's model.Model.RunsTransformersForward says (HFStage). With --tp each stage is
split by tp.py's plan for them (hftp.py), with sequence parallelism unless --no-sp
(the stages then exchange the local shards of the residual stream's DTensor), and
--ep beside it as for a spec (hftp.SeqShardMoE).

--batch is the micro-batch; a step pipelines --microbatches of them. Trains in
amp-bf16 with AdamW (foreach; the memplan command line says so, since specs may
name another implementation) and prints one JSON line on rank 0 with every
rank's peaks and the memplan command line. Pipeline rank r's figures are
memplan's pipeline.kinds for stage r (one stage per rank) or rank r
(interleaved). The modules are built on the meta device, as torchtitan does.
"""
import argparse
import os
import sys
import time

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

import common


def stage_layers(layers, stages):
    """torchtitan's split with input and output weights of 1 (model.StageLayers)."""
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


def apply_tp_stage(model, mesh, sp, ep=False):
    """tp.py's apply_tp (torchtitan's plan, without loss parallelism) on a stage:
    the embedding and the head only where the stage holds them; a MoE block
    split by columns, or with ep left to route its sequence shard."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module
    seq = Shard(1) if sp else Replicate()
    root = {}
    if model.tok_embeddings is not None:
        root["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.output is not None:
        root["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
        if sp:
            root["norm"] = SequenceParallel()
    if root:
        parallelize_module(model, mesh, root)
    common.apply_tp_blocks(model, mesh, sp, ep)


def build_stage(d, split, stage, n_stages, checkpointing, tp_mesh, sp, ep_args=None):
    """The module of one stage: its blocks (by name), the embedding on the
    first stage, the final norm and the head on the last; built on meta,
    tensor-parallel if asked, then materialised and initialised on the GPU.
    ep_args (ep, router, group): expert parallelism beside tensor
    parallelism, applied on meta before the stage is materialised, as
    torchtitan parallelises before it materialises (only the rank's experts
    are ever allocated); the stage's list of ep.apply's rows is model.ep_log."""
    first = sum(split[:stage])
    keep = {str(i) for i in range(first, first + split[stage])}
    with torch.device("meta"):
        model = common.Llama(d, checkpointing=checkpointing)
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if stage != 0:
        model.tok_embeddings = None
    if stage != n_stages - 1:
        model.norm, model.output = None, None
    if tp_mesh is not None:
        apply_tp_stage(model, tp_mesh, sp, ep_args is not None)
    if ep_args is not None:
        import ep
        model.ep_log = ep.apply(model, ep_args[0], "random", ep_args[2])
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
        inv = 1.0 / (500000.0 ** (torch.arange(0, d["head_dim"], 2, dtype=torch.float32, device="cuda") / d["head_dim"]))
        ang = torch.outer(torch.arange(d["seq"], dtype=torch.float32, device="cuda"), inv)
        ang = torch.cat((ang, ang), dim=-1)
        model.rope.copy_(torch.stack((ang.cos(), ang.sin())))
    if ep_args is not None and ep_args[1] == "zero":
        import ep
        ep.zero_routers(model)
    return model


class Skip(torch.nn.Module):
    """A decoder layer another stage holds: the hidden states pass."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


class HFStage(torch.nn.Module):
    """One pipeline stage of a transformers causal LM (the module docstring).
    The layers other stages hold are Skip, so that every layer keeps its
    place: the forward's loop hands each its own mask (GPT-OSS picks it by
    the layer's place) and the cache its own slot."""

    def __init__(self, hf, keep, first, last):
        super().__init__()
        self.model = hf.model
        keep = set(keep)
        self.model.layers = torch.nn.ModuleList(
            [l if i in keep else Skip() for i, l in enumerate(self.model.layers)])
        if not first:
            self.model.embed_tokens = None
        if not last:
            self.model.norm = torch.nn.Identity()
        self.lm_head = hf.lm_head if last else None
        self.first = first

    def forward(self, x):
        # Under sequence parallelism (sp_mesh, hftp.py) the residual stream
        # is a DTensor sharded along the sequence inside the stage, and the
        # stages exchange its local shards.
        sp = getattr(self, "sp_mesh", None)
        if self.first:
            h = self.model(input_ids=x).last_hidden_state
        else:
            if sp is not None:
                from torch.distributed.tensor import DTensor, Shard
                x = DTensor.from_local(x, sp, (Shard(1),), run_check=False)
            h = self.model(inputs_embeds=x).last_hidden_state
        if self.lm_head is not None:
            logits = self.lm_head(h)
            config = self.model.config
            cap = getattr(config, "final_logit_softcapping", None)
            if cap:
                # Gemma 2's CausalLM forward caps the logits: x / cap,
                # tanh, · cap.
                logits = logits / cap
                logits = torch.tanh(logits)
                logits = logits * cap
            if config.model_type == "granite":
                logits = logits / config.logits_scaling  # GraniteForCausalLM's
            if config.model_type == "cohere":
                logits = logits * config.logit_scale  # CohereForCausalLM's
            return logits
        return h.to_local() if sp is not None else h


def hf_dims(path, seq):
    """pp.py's dims of a transformers config (what main reads of them)."""
    import json
    with open(path) as f:
        cfg = json.load(f)
    # Where the file is silent the config class's default decides
    # (build_hf_stage and hftp.build read it again from the built config:
    # Gemma 2's, Cohere's and StarCoder2's tie).
    tied = bool(cfg.get("tie_word_embeddings", False))
    # transformers runs GPT-OSS in eager attention only (its sinks).
    attn = "eager" if cfg.get("model_type") == "gpt_oss" else "sdpa"
    return dict(hf=path, attn=attn, layers=cfg["num_hidden_layers"], vocab=cfg["vocab_size"], seq=seq, tied=tied,
                experts=int(cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0))


def build_hf_stage(d, split, stage, n_stages, checkpointing, ep_args=None, tp_mesh=None, sp=False):
    """The HFStage of one stage: the model built on meta, the other stages'
    layers replaced by Skip, its experts split with ep.py when ep_args (ep, router, group)
    are given, then materialised and initialised on the GPU (the rotary
    tables' inverse frequencies made again there, the other buffers zeroed:
    DeepSeek-V3's router correction bias; zeroed routers zeroed again). The
    stage's list of ep.apply's rows is model.ep_log."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import measure  # bench/torch/measure.py: the config read as measure.py reads it
    first = sum(split[:stage])
    with torch.device("meta"):
        hf, _ = measure.build_hf(d["hf"], d["attn"])
    if checkpointing:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # A tied config is split as a spec's is (the module docstring): the
    # last stage's head keeps the tied parameter as its own copy.
    d["tied"] = bool(getattr(hf.config, "tie_word_embeddings", False))
    model = HFStage(hf, range(first, first + split[stage]), stage == 0, stage == n_stages - 1)
    import hftp  # tp.py's plan for transformers' models, materialise
    if tp_mesh is not None:
        if model.model.embed_tokens is not None:
            model.model.embed_tokens.padding_idx = None  # DTensor's sharded embedding takes none
        hftp.apply(model, tp_mesh, False, sp, ep_args is not None)
        if sp:
            model.sp_mesh = tp_mesh
    if ep_args is not None:
        import ep
        model.ep_log = ep.apply(model, ep_args[0], "random", ep_args[2])
    hftp.materialise(model, hf.config)
    if ep_args is not None and ep_args[1] == "zero":
        import ep
        ep.zero_routers(model)
    model.hf_config = hf.config
    return model.train()


def stage_blocks(model):
    """A stage's decoder blocks: common.Llama's layers dict or an HFStage's list."""
    if isinstance(model, HFStage):
        return [l for l in model.model.layers if not isinstance(l, Skip)]
    return list(model.layers.values())


# memplan's ZeRO stage for each --mode: FSDP under a pipeline never reshards
# within a step, which memplan simulates alike at stages 2 and 3.
ZERO = {"ddp": 0, "zero1": 1, "fsdp": 2}


def wrap_dp(model, mode, mesh, local, efsdp=None):
    """A stage's data parallelism over its replicas: DistributedDataParallel
    (ddp, zero1), or fully_shard on every block and then the stage without
    resharding after forward (fsdp; torchtitan's apply_fsdp under a pipeline),
    with expert parallelism each block's experts first over efsdp, the
    replicas that hold the same experts (ep.shard_experts, as train.py does)."""
    if mode in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[local], process_group=mesh.get_group())
    from torch.distributed.fsdp import fully_shard
    for block in stage_blocks(model):
        if efsdp is not None:
            import ep
            ep.shard_experts(block, efsdp, reshard_after_forward=False)
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model


def embedding_group(world, pp, rank):
    """Megatron-LM's embedding group for this rank: the ranks of the first
    and the last pipeline stage with its data- and tensor-parallel
    coordinate (every mesh here has pp outermost), or None on the middle
    stages. Every rank creates every group, as new_group requires."""
    import torch.distributed as dist
    inner = world // pp
    mine = None
    for i in range(inner):
        ranks = [i, (pp - 1) * inner + i]
        g = dist.new_group(ranks)
        if rank in ranks:
            mine = g
    return mine


def tied_weights(modules):
    """The rank's copies of a tied embedding: the first stage's embedding
    weight, the last stage's head weight (DDP's wrapped module looked
    into)."""
    out = []
    for m in modules:
        m = getattr(m, "module", m)
        emb = m.model.embed_tokens if isinstance(m, HFStage) else getattr(m, "tok_embeddings", None)
        if emb is not None:
            out.append(emb.weight)
        if head_weight(m) is not None:
            out.append(head_weight(m))
    return out


def head_weight(m):
    """A stage's head weight (common.Llama's output, an HFStage's lm_head),
    or None where the stage has no head."""
    head = m.lm_head if isinstance(m, HFStage) else getattr(m, "output", None)
    return None if head is None else head.weight


def local_tensor(t):
    from torch.distributed.tensor import DTensor
    return t.to_local() if isinstance(t, DTensor) else t


def grad_shard(w):
    """The rank's part of w's gradient, as the rank holds w: under tensor
    parallelism RowwiseParallel's embedding computes its gradient whole
    (Replicate) over a row shard of the weight, so the rows of the rank's
    shard are taken, in place (a view): the head's gradient is that shard's."""
    g = w.grad
    if g is None:
        return None
    gl, wl = local_tensor(g), local_tensor(w)
    if gl.shape == wl.shape:
        return gl
    mesh = w.device_mesh
    assert mesh.ndim == 1 and gl.shape[0] == w.shape[0], (tuple(gl.shape), tuple(wl.shape), mesh)
    k = wl.shape[0]
    r = mesh.get_local_rank()
    return gl[r * k:(r + 1) * k]


def sync_tied(modules, group, grads):
    """Megatron-LM's all-reduces over the embedding group: at the start the
    weights (the head's copy zeroed first, so both become the embedding's),
    after each backward the gradients (grad_shard)."""
    import torch.distributed as dist
    with torch.no_grad():
        for m in modules:
            mm = getattr(m, "module", m)
            for w in tied_weights([m]):
                t = grad_shard(w) if grads else local_tensor(w)
                if t is None:
                    continue
                if not grads and w is head_weight(mm):
                    t.zero_()
                dist.all_reduce(t, group=group)


def experts_implementation(modules):
    """What transformers' MoE blocks of the stages run (None without one)."""
    for m in modules:
        m = getattr(m, "module", m)
        if isinstance(m, HFStage):
            return getattr(m.hf_config, "_experts_implementation", None)
        for x in m.modules():
            if isinstance(x, common.HFMoE):
                return x.implementation
    return None


def main():
    ap = argparse.ArgumentParser()
    common.add_common_args(ap)
    ap.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--stages-per-rank", dest="virtual", type=int, default=2,
                    help="stages per rank (interleaved); not --virtual, which torchrun takes for its --virtual-local-rank")
    ap.add_argument("--tp", type=int, default=1, help="tensor parallelism inside each stage (pp × tp mesh)")
    ap.add_argument("--no-sp", action="store_true", help="with --tp: without sequence parallelism")
    ap.add_argument("--dp", type=int, default=1, help="data parallelism over each stage's replicas (pp × dp mesh)")
    ap.add_argument("--mode", choices=["ddp", "zero1", "fsdp"], default="ddp", help="with --dp: how the replicas share")
    ap.add_argument("--ep", type=int, default=1,
                    help="expert parallelism over each stage's replicas (a MoE spec, --dp a multiple): "
                         "bench/torch/dist/ep.py splits every stage's experts over the dp group")
    ap.add_argument("--ep-mesh", dest="ep_mesh", action="store_true",
                    help="with --ep under DDP: the (pp, efsdp, ep) mesh FSDP uses, so that the all-to-all runs on an EP "
                         "group of its own (its own NCCL communicator), as torchtitan's mesh has; without it the dp group")
    ap.add_argument("--router", choices=["zero", "random"], default="zero",
                    help="with --ep: ep.py's routers (zero: every pair to one rank of the group, the skew ep)")
    ap.add_argument("--step-pause", dest="step_pause", type=float, default=0.0,
                    help="after the first optimizer step: torch.cuda.synchronize(), then sleep this many seconds "
                         "(memplan's --step-pause: DDP's old bucket freed at its rebuild, docs/multigpu.md)")
    a = ap.parse_args()
    rank, world, local = common.setup()
    assert world % (a.tp * a.dp) == 0, f"world {world} is not a multiple of tp·dp {a.tp * a.dp}"
    pp, sp = world // (a.tp * a.dp), not a.no_sp
    hf = a.spec.endswith(".json")
    d = hf_dims(a.spec, a.seq or 2048) if hf else common.llama_dims(a.spec, a.seq)
    tp_mesh, dp_mesh, efsdp_mesh, ep_mesh, group, pp_rank = None, None, None, None, None, rank
    if a.tp > 1 or a.dp > 1:
        from torch.distributed.device_mesh import init_device_mesh
        if a.ep > 1 and a.tp > 1:
            # torchtitan's meshes with EP beside TP: the dense (pp, dp, tp)
            # and the sparse (pp, efsdp, ep) over the same ranks, EP groups
            # of consecutive dp·tp ranks (tp innermost).
            assert (a.dp * a.tp) % a.ep == 0 and not a.no_sp and (a.dp == 1 or a.mode == "fsdp"), \
                "--ep beside --tp: ep dividing dp·tp, sequence parallelism, FSDP when dp > 1"
            dims = [(n, k) for n, k in (("pp", pp), ("dp", a.dp), ("tp", a.tp)) if n == "pp" or k > 1]
            mesh = init_device_mesh("cuda", tuple(k for _, k in dims), mesh_dim_names=tuple(n for n, _ in dims))
            group, pp_rank = mesh["pp"].get_group(), mesh["pp"].get_local_rank()
            tp_mesh, dp_mesh = mesh["tp"], (mesh["dp"] if a.dp > 1 else None)
            sparse = init_device_mesh("cuda", (pp, a.dp * a.tp // a.ep, a.ep), mesh_dim_names=("pp", "efsdp", "ep"))
            ep_mesh, efsdp_mesh = sparse["ep"], (sparse["efsdp"] if a.dp > 1 else None)
        elif a.ep > 1 and (a.mode == "fsdp" or a.ep_mesh):
            # torchtitan's mesh for EP under FSDP: dp split into the ranks
            # that hold the same experts (efsdp) and the EP group.
            assert a.tp == 1 and a.dp % a.ep == 0, "--ep with --mode fsdp: dp a multiple of ep, no tp"
            mesh = init_device_mesh("cuda", (pp, a.dp // a.ep, a.ep), mesh_dim_names=("pp", "efsdp", "ep"))
            efsdp_mesh = mesh["efsdp"] if a.mode == "fsdp" else None
            ep_mesh = mesh["ep"]
            dp_mesh = mesh["efsdp", "ep"]._flatten("dp")
            group, pp_rank, tp_mesh = mesh["pp"].get_group(), mesh["pp"].get_local_rank(), None
        else:
            dims = [(n, k) for n, k in (("pp", pp), ("dp", a.dp), ("tp", a.tp)) if n == "pp" or k > 1]
            mesh = init_device_mesh("cuda", tuple(k for _, k in dims), mesh_dim_names=tuple(n for n, _ in dims))
            group, pp_rank = mesh["pp"].get_group(), mesh["pp"].get_local_rank()
            tp_mesh = mesh["tp"] if a.tp > 1 else None
            dp_mesh = mesh["dp"] if a.dp > 1 else None
    v = a.virtual if a.schedule == "interleaved" else 1
    n_stages = pp * v
    split = stage_layers(d["layers"], n_stages)
    stage_ids = [pp_rank + k * pp for k in range(v)]
    torch.manual_seed(0)
    ep_args = (a.ep, a.router, ep_mesh.get_group()) if a.ep > 1 and a.tp > 1 else None
    if hf:
        if a.ep > 1 and a.tp == 1:
            # The experts split on the meta device, before the stage is
            # materialised (torchtitan's order: only the rank's experts
            # are ever allocated, as memplan simulates).
            assert dp_mesh is not None and a.dp % a.ep == 0, "--ep needs --dp a multiple of it"
            ep_args = (a.ep, a.router, ep_mesh.get_group() if ep_mesh is not None else dp_mesh.get_group())
        modules = [build_hf_stage(d, split, s, n_stages, a.checkpointing == "every-block", ep_args, tp_mesh,
                                  sp and tp_mesh is not None) for s in stage_ids]
    else:
        modules = [build_stage(d, split, s, n_stages, a.checkpointing == "every-block", tp_mesh, sp, ep_args)
                   for s in stage_ids]
    dev = torch.device("cuda", local)
    logs = []  # ep.apply's lists, which the stages' forwards fill
    if ep_args is not None:
        logs = [m.ep_log for m in modules]
    elif a.ep > 1:
        # Each stage's experts over its EP group (the dp group, or under
        # FSDP the mesh's ep dimension), before DDP or FSDP wraps them, as
        # train.py --ep does for a whole model.
        import ep
        assert dp_mesh is not None and a.dp % a.ep == 0, "--ep needs --dp a multiple of it"
        ep_group = ep_mesh.get_group() if ep_mesh is not None else dp_mesh.get_group()
        logs = [ep.apply(m, a.ep, a.router, ep_group) for m in modules]
    emb_group = embedding_group(world, pp, rank) if d["tied"] else None
    if emb_group is not None:
        sync_tied(modules, emb_group, grads=False)
    if dp_mesh is not None:
        modules = [wrap_dp(m, a.mode, dp_mesh, local, efsdp_mesh) for m in modules]
    stages = [PipelineStage(m, s, n_stages, dev, group=group) for m, s in zip(modules, stage_ids)]
    if a.schedule == "interleaved":
        sched = ScheduleInterleaved1F1B(stages, n_microbatches=a.microbatches, loss_fn=common.loss_fn)
    else:
        cls = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
        sched = cls(stages[0], n_microbatches=a.microbatches, loss_fn=common.loss_fn)
    # Tensor-parallel norms without sequence parallelism keep plain
    # parameters: foreach AdamW gets them in their own group (as tp.py).
    from torch.distributed.tensor import DTensor
    params = [p for m in modules for p in m.parameters()]
    if dp_mesh is not None and a.mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=dp_mesh.get_group(),
                                      lr=1e-4, foreach=True)
    else:
        groups = [[p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)]]
        opt = torch.optim.AdamW([{"params": g} for g in groups if g], lr=1e-4, foreach=True)
    n = a.batch * a.microbatches
    g = torch.Generator(device="cuda").manual_seed(0)
    inp = torch.randint(0, d["vocab"], (n, d["seq"]), device="cuda", generator=g)
    labels = torch.randint(0, d["vocab"], (n, d["seq"]), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = []
    for _ in range(a.steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if pp_rank == 0:
                sched.step(inp)
            elif pp_rank == pp - 1:
                sched.step(target=labels, losses=[])
            else:
                sched.step()
        if tp_mesh is not None and hf:
            import hftp
            for m in modules:
                hftp.reduce_partial_grads(m, tp_mesh.get_group())
        elif tp_mesh is not None and d["experts"]:
            for m in modules:
                common.allreduce_router_grads(m, tp_mesh.get_group())
        if emb_group is not None:
            sync_tied(modules, emb_group, grads=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ep_args is not None and a.router == "zero":
            # Again after every step, as tp.py and train.py do (the
            # transformers stages too; common.Llama's stages under EP
            # without TP were measured without it, and keep that).
            import ep
            for m in modules:
                ep.zero_routers(m)
        torch.cuda.synchronize()
        if a.step_pause > 0 and not steps:
            time.sleep(a.step_pause)
        steps.append(common.peaks(local))
    config = {"script": "pp", "spec": a.spec, "pp": pp, "schedule": a.schedule, "microbatches": a.microbatches,
              "virtual": v, "stage_layers": split, "tp": a.tp, "tied": d["tied"],
              "embedding_group": emb_group is not None, "sp": sp and a.tp > 1, "batch": a.batch,
              "dp": a.dp, "mode": a.mode if a.dp > 1 else None, "step_pause": a.step_pause,
              "experts": d["experts"], "experts_implementation": experts_implementation(modules),
              "ep": a.ep, "router": a.router if a.ep > 1 else None, "ep_mesh": ep_mesh is not None,
              # rank 0's most rows received by one block's experts, and that block's routed pairs
              "recv_rows_max": max(((r, n) for log in logs for _, r, n in log), default=None),
              "seq": d["seq"], "checkpointing": a.checkpointing, "world": world,
              # Which runtime torch runs the schedule with: memplan models
              # _PipelineScheduleRuntime for interleaved (send Works kept to
              # the end of step()), PipelineScheduleSingle for gpipe and 1f1b.
              "schedule_bases": [c.__name__ for c in type(sched).__mro__[1:4]]}
    cmd = common.memplan_cmd(("--hf " if hf else "") + a.spec, a.batch, d["seq"], pp=pp, pp_schedule=a.schedule,
                             pp_virtual=v if a.schedule == "interleaved" else None, microbatches=a.microbatches,
                             tp=a.tp if a.tp > 1 else None, sp=sp and a.tp > 1,
                             dp=a.dp if a.dp > 1 else None, zero=ZERO[a.mode] if a.dp > 1 else None,
                             checkpointing=a.checkpointing, optimizer="adamw-foreach",
                             step_pause=a.step_pause if a.step_pause > 0 else None,
                             ep=a.ep if a.ep > 1 else None, ep_skew=a.ep if a.ep > 1 and a.router == "zero" else None)
    common.report(a.label, config, cmd, steps, local)


if __name__ == "__main__":
    main()
