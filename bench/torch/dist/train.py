#!/usr/bin/env python3
"""One rank of a real data-parallel training run, for memplan's ground truth.

    torchrun --nproc_per_node=2 bench/torch/dist/train.py SPEC --mode MODE
        [--reshard true|false|INT] [--batch N] [--seq N] [--precision P]
        [--checkpointing C] [--grad-accum N] [--lora R [--targets T] [--lora-dropout P] [--adapter-dtype fp32|base]] [--steps 3]
        [--snapshot [--snapshot-from K]] [--lag S] [--meta-init] [--keep-cache] --result DIR

MODE is ddp (DistributedDataParallel, default buckets), ddp-view (the same
with gradient_as_bucket_view=True), zero1 (ZeroRedundancyOptimizer over DDP,
as memplan's --zero 1 and bench/torch/measure.py) or fsdp (FSDP2 fully_shard
on every transformer block and the root). PRECISION is memplan's fp32,
amp-bf16 (fp32 weights, autocast), bf16 (weights cast to bf16 on the host) or
fsdp-bf16 (fp32 weights, FSDP2 MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), no autocast: torchtitan's default; fsdp mode only).

With --lora R the model is wrapped by peft (LoraConfig r=R, lora_alpha=R,
target_modules as bench/torch/lora.py maps --targets attn|mlp|all|NAMES,
adapters in fp32 by peft's autocast_adapter_dtype, or with --adapter-dtype
base in the base's dtype) before DDP or
fully_shard, with checkpointing and enable_input_require_grads set on the
base as lora.py sets them; the optimizer gets the trainable parameters
only, as transformers' Trainer gives it.

FSDP2 models are built on the host and fully_shard moves each unit to the
GPU whole before sharding it (the cache is emptied after: memplan's
--empty-cache-after-wrap; --keep-cache leaves it, memplan's default); with --meta-init
the model is built on the meta device, sharded, then materialised in place
with to_empty (torchtitan's init), its buffers copied from a host-built twin
(docs/multigpu.md, "Wrapping a model built on the host").

The model and the training loop are bench/torch/measure.py's (transformers'
loss, outputs dropped before backward, AdamW foreach,
zero_grad(set_to_none=True)). Every rank writes DIR/rank<R>.json: the device
memory in use from the driver at each stage (before and after the process
group, after the first collective of each kind, after wrapping, after every
step), per-step peak allocated and reserved, the reserved bytes per CUDA
stream, the rank's parameter, gradient and optimizer-state bytes, DDP's
buckets, ZeroRedundancyOptimizer's partition. With --snapshot, the allocator's
history over the steps is pickled (gzip) to DIR/snapshot-rank<R>.pickle.gz.
"""
import argparse, gzip, json, os, pickle, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import measure  # noqa: E402  (bench/torch/measure.py: model construction)


def experts_placement(a, block):
    """--fsdp-experts: FSDP2's placement of block's fused expert weights
    (memplan's fsdp_experts): dim0 leaves fully_shard's default (Shard(0),
    along the experts); dim1 returns Shard(1) for each; auto does so where
    the ranks outnumber the block's experts, as torchtitan's apply_fsdp
    does. None where nothing changes."""
    if a.fsdp_experts == "dim0" or a.ep > 1:
        return None
    from torch.distributed.tensor import Shard
    import ep
    weights = {p for m in ep.experts_modules(block) for p in m.parameters() if p.dim() == 3}
    if a.fsdp_experts == "auto":
        weights = {p for p in weights if a.world > p.shape[0]}
    if not weights:
        return None
    return lambda p: Shard(1) if p in weights else None


def memplan_command(a, t):
    """The memplan command line that describes this configuration."""
    zero = {"ddp": 0, "ddp-view": 0, "zero1": 1}.get(a.mode)
    to = int(a.reshard) if a.reshard.isdigit() else 0
    if zero is None:
        zero = 2 if a.reshard == "false" or to == 1 else 3  # FSDP2 turns 1 into False, the world into True
    src = ("--hf " if a.spec.endswith(".json") else "") + a.spec
    c = "memplan estimate %s --batch %d --seq %d --precision %s --dp %d --zero %d" % (
        src, t["batch"], t["seq"], t["precision"], a.world, zero)
    if a.mode == "fsdp" and 1 < to < a.world // max(a.replicate, 1):
        c += " --reshard-after-forward %d" % to
    if a.mode == "fsdp" and a.replicate > 1:
        c += " --dp-replicate %d" % a.replicate
    if a.ep > 1:
        c += " --ep %d --ep-skew %s" % (a.ep, a.ep_skew)
    if a.grad_accum_n > 1:
        c += " --grad-accum %d" % a.grad_accum_n
    if t["checkpointing"] != "none":
        c += " --checkpointing " + t["checkpointing"]
    if t.get("attention", "sdpa") != "sdpa":
        c += " --attention " + t["attention"]
    if a.mode == "ddp-view":
        c += " --bucket-view"
    if a.meta_init:
        c += " --fsdp-init meta"
    elif a.mode == "fsdp" and not a.keep_cache:
        c += " --empty-cache-after-wrap"  # the cache is emptied after wrapping (main)
    if a.fsdp_experts != "dim0":
        c += " --fsdp-experts " + a.fsdp_experts
    if a.lora:
        c += " --lora %d --lora-targets %s --lora-alpha %d" % (a.lora, a.targets, a.lora)
        if a.lora_dropout:
            c += " --lora-dropout %g" % a.lora_dropout
        if a.adapter_dtype != "fp32":
            c += " --lora-adapter-dtype " + a.adapter_dtype
    # The loop below pauses after every step (nvidia-smi, then synchronize
    # and sleep 0.2 s), which lets DDP's bucket rebuild free its old flat
    # bucket (docs/multigpu.md); --no-pause leaves it out.
    if not a.no_pause:
        c += " --step-pause 0.2"
    if a.alloc_conf:
        c += " --alloc-conf " + a.alloc_conf
    return c + " --format json"


def device_used(torch):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def smi_used(pid):
    """This process's memory on its GPU as nvidia-smi reports it (bytes)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except Exception:  # noqa: BLE001
        return None
    tot = 0
    for line in out.splitlines():
        p = [x.strip() for x in line.split(",")]
        if len(p) == 2 and p[0] == str(pid) and p[1].isdigit():
            tot += int(p[1]) << 20
    return tot


def per_stream(torch):
    """Reserved bytes (segments) and allocated bytes per CUDA stream."""
    res = {}
    for seg in torch.cuda.memory_snapshot():
        s = res.setdefault(str(seg["stream"]), {"reserved": 0, "allocated": 0, "segments": 0})
        s["reserved"] += seg["total_size"]
        s["allocated"] += seg["allocated_size"]
        s["segments"] += 1
    return res


def local_bytes(t):
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def state_bytes(opt):
    inner = getattr(opt, "optim", opt)
    n = 0
    for st in inner.state.values():
        for v in st.values():
            if hasattr(v, "numel") and v.numel() > 1:
                n += local_bytes(v)
    return n


def stream_names(torch, model):
    """Names for FSDP2's streams (their ids as the snapshot prints them)."""
    names = {str(torch.cuda.current_stream().cuda_stream): "default"}
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_state import _get_module_fsdp_state
        st = _get_module_fsdp_state(model)
        ctx = st._comm_ctx
        for k in ("all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream", "all_reduce_stream"):
            s = getattr(ctx, k, None)
            if s is not None:
                names[str(s.cuda_stream)] = k
    except Exception as e:  # noqa: BLE001
        names["error"] = str(e)
    return names


def save_snapshot(torch, d, rank):
    """The allocator's segments and the recorded history, gzipped pickle."""
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(os.path.join(d, "snapshot-rank%d.pickle.gz" % rank), "wb") as f:
        pickle.dump(snap, f)


def apply_lora(a, spec, model, kind, t, torch):
    """peft's LoRA over the built model, as bench/torch/lora.py applies it:
    wrap first, then checkpointing and the input-gradient hook on the base."""
    import peft
    import lora
    targets = lora.resolve_targets(a.targets, spec, model)
    cfg = peft.LoraConfig(r=a.lora, lora_alpha=a.lora, lora_dropout=a.lora_dropout, target_modules=targets,
                          bias="none")
    model = peft.get_peft_model(model, cfg, autocast_adapter_dtype=a.adapter_dtype == "fp32")
    base = model.get_base_model()
    measure.enable_checkpointing(base, kind, t["checkpointing"], torch)
    if t["checkpointing"] != "none":
        base.enable_input_require_grads()
    return model, {"rank": a.lora, "alpha": a.lora, "dropout": a.lora_dropout, "targets": a.targets,
                   "adapter_dtype": a.adapter_dtype, "input_require_grads": t["checkpointing"] != "none",
                   "peft": peft.__version__,
                   "modules": sum(1 for _, m in model.named_modules() if hasattr(m, "lora_A") and len(m.lora_A) > 0)}


def trainable(model):
    """The parameters an optimizer is given: all, or under LoRA the adapters."""
    return [p for p in model.parameters() if p.requires_grad]


def wrap(a, model, kind, t, torch, rank):
    import torch.distributed as dist
    dev = torch.device("cuda", rank)
    info = {}
    if a.mode in ("ddp", "ddp-view", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = model.to(dev)
        model = DDP(model, device_ids=[rank], gradient_as_bucket_view=a.mode == "ddp-view")
        if a.mode == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            proto = measure.make_optimizer(t["optimizer"], [torch.nn.Parameter(torch.zeros(1, device=dev))], torch)
            kw = {k: v for k, v in proto.defaults.items() if k in ("lr", "foreach", "fused", "weight_decay")}
            opt = ZeroRedundancyOptimizer(trainable(model), optimizer_class=type(proto), **kw)
            part = opt._partition_parameters()
            info["zero_partition_numel"] = [[p.numel() for g in part[r] for p in g["params"]] for r in range(a.world)]
            info["param_numel_order"] = [p.numel() for p in trainable(model)]
        else:
            opt = measure.make_optimizer(t["optimizer"], trainable(model), torch)
        return model, opt, info
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    kw = {}
    if t["precision"] == "fsdp-bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    r = a.reshard
    raf = True if r == "true" else False if r == "false" else int(r)
    if a.replicate > 1:
        # HSDP: FSDP2 over a (replicate, shard) mesh, each parameter sharded
        # over its group of world/R ranks (memplan's --dp-replicate).
        from torch.distributed.device_mesh import init_device_mesh
        assert a.world % a.replicate == 0 and a.ep == 1, "--replicate divides the world, without --ep"
        kw["mesh"] = init_device_mesh("cuda", (a.replicate, a.world // a.replicate), mesh_dim_names=("replicate", "shard"))
    blocks = None
    for _, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) > 1:
            blocks = list(mod)
            break
    for b in blocks or []:
        if a.ep > 1:
            import ep
            ep.shard_experts(b, a.edp_mesh, reshard_after_forward=raf, **kw)
        fully_shard(b, reshard_after_forward=raf, shard_placement_fn=experts_placement(a, b), **kw)
    # The root: reshard_after_forward as given (torch's default None would
    # keep it unsharded; memplan's --zero 3 means every unit resharded).
    fully_shard(model, reshard_after_forward=raf, **kw)
    info["fsdp_units"] = len(blocks or []) + 1
    opt = measure.make_optimizer(t["optimizer"], trainable(model), torch)
    return model, opt, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--mode", required=True, choices=["ddp", "ddp-view", "zero1", "fsdp"])
    ap.add_argument("--reshard", default="true")
    ap.add_argument("--replicate", type=int, default=1,
                    help="with --mode fsdp: HSDP, R replicas of an FSDP group of world/R ranks (a 2-D mesh)")
    for k in ("batch", "seq"):
        ap.add_argument("--" + k, dest=k, type=int)
    for k in ("precision", "checkpointing"):
        ap.add_argument("--" + k, dest=k)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--grad-accum", dest="grad_accum_n", type=int, default=1,
                    help="micro-batches per optimizer step, each backward reducing its gradients "
                         "(a plain accumulation loop, without no_sync; memplan's --grad-accum)")
    ap.add_argument("--attention", choices=["sdpa", "eager"], default=None,
                    help="the attention implementation (measure.py's; GPT-OSS needs eager)")
    ap.add_argument("--snapshot", action="store_true")
    ap.add_argument("--snapshot-from", dest="snapshot_from", type=int, default=1,
                    help="with --snapshot: the step the history starts at (0: the first, after wrapping; -1: before wrapping)")
    ap.add_argument("--lag", type=float, default=0,
                    help="seconds the last rank sleeps before the second step (ranks out of step: "
                         "DDP's bucket rebuild waits on a broadcast from rank 0)")
    ap.add_argument("--alloc-conf", dest="alloc_conf", default=None,
                    help="PYTORCH_ALLOC_CONF for this run (set before torch is imported)")
    ap.add_argument("--ep", type=int, default=1,
                    help="expert parallelism over groups of EP ranks (bench/torch/dist/ep.py; ddp mode)")
    ap.add_argument("--router", choices=["random", "zero"], default="random",
                    help="with --ep: zero ties every token's routing (one rank receives its group's every pair)")
    ap.add_argument("--no-pause", dest="no_pause", action="store_true",
                    help="no nvidia-smi between steps: the second step starts at once, as in a training loop "
                         "(DDP's bucket rebuild race, docs/multigpu.md)")
    ap.add_argument("--lora", type=int, default=0, help="peft LoRA adapters of this rank over a frozen base")
    ap.add_argument("--targets", default="all", help="with --lora: attn, mlp, all or NAME,... (bench/torch/lora.py)")
    ap.add_argument("--lora-dropout", dest="lora_dropout", type=float, default=0.0)
    ap.add_argument("--adapter-dtype", dest="adapter_dtype", choices=("fp32", "base"), default="fp32",
                    help="with --lora: peft's autocast_adapter_dtype (fp32 adapters) or the base's dtype")
    ap.add_argument("--fsdp-experts", dest="fsdp_experts", choices=["dim0", "dim1", "auto"], default="dim0",
                    help="with --mode fsdp: shard fused expert weights along the experts (fully_shard's default), "
                         "along their second dimension, or so where the ranks outnumber the experts (torchtitan)")
    ap.add_argument("--meta-init", dest="meta_init", action="store_true",
                    help="with --mode fsdp: build the model on the meta device, fully_shard it, then to_empty "
                         "(torchtitan's init; memplan's --fsdp-init meta); buffers copied from a host-built twin")
    ap.add_argument("--keep-cache", dest="keep_cache", action="store_true",
                    help="with --mode fsdp: leave the cache as fully_shard left it, as accelerate does "
                         "(memplan's default; without, the cache is emptied: --empty-cache-after-wrap)")
    ap.add_argument("--result", required=True)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    # MEMPLAN_FAKE_WORLD=N: rank 0 of an N-rank FSDP2 job alone on GPU 0,
    # without torchrun, over torch's fake process group (as common.py runs
    # tp.py and cp.py ranks): its collectives move nothing and no NCCL
    # communicator exists, so its device total holds no NCCL memory.
    fake = int(os.environ.get("MEMPLAN_FAKE_WORLD", "0"))
    if fake:
        rank, a.world = 0, fake
    else:
        rank, a.world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    if a.alloc_conf:
        os.environ["PYTORCH_ALLOC_CONF"] = a.alloc_conf
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    a.optimizer = a.zero_grad = a.image = a.dp = a.zero = None
    a.grad_accum = a.grad_accum_n  # the record's training says what the loop runs
    prec = a.precision
    if prec == "fsdp-bf16":
        a.precision = "amp-bf16"  # load_spec accepts it; restored below
    if fake and (a.mode != "fsdp" or a.ep > 1):
        raise SystemExit("MEMPLAN_FAKE_WORLD needs --mode fsdp without --ep (DDP's reducer rejects the fake all-reduce)")
    if a.ep > 1 and a.mode not in ("ddp", "fsdp"):
        raise SystemExit("--ep needs --mode ddp or fsdp (memplan simulates EP at ZeRO 0, 2 and 3)")
    # The skew memplan is given: the busiest share measured, filled in after
    # the steps (ep when the tied router sends one rank everything).
    a.ep_skew = "MEASURED"
    spec = measure.load_hf(a.spec, a) if a.spec.endswith(".json") else measure.load_spec(a.spec, a)
    t = spec["training"]
    t["precision"] = prec or t["precision"]
    if t["precision"] == "fsdp-bf16" and a.mode != "fsdp":
        raise SystemExit("fsdp-bf16 needs --mode fsdp")
    rec = {"label": a.label, "spec": a.spec, "mode": a.mode, "reshard": a.reshard if a.mode == "fsdp" else None,
           "step_pause": 0 if a.no_pause else 0.2, "meta_init": a.meta_init, "keep_cache": a.keep_cache, "fsdp_experts": a.fsdp_experts,
           "replicate": a.replicate if a.replicate > 1 else None,
           "rank": rank, "world": a.world, "fake_world": fake or None, "training": t, "date": time.strftime("%Y-%m-%d"),
           "memplan": memplan_command(a, t), **measure.versions(torch),
           "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM", "PYTORCH_CUDA", "PYTORCH_ALLOC"))}}
    stages = {}
    os.makedirs(a.result, exist_ok=True)
    out = os.path.join(a.result, "rank%d.json" % rank)
    try:
        stages["context"] = device_used(torch)
        torch.ones(1, device="cuda")
        stages["first_tensor"] = device_used(torch)
        if fake:
            from torch.testing._internal.distributed.fake_pg import FakeStore
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=fake)
        else:
            dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
        stages["pg_init"] = device_used(torch)
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        stages["first_all_reduce"] = device_used(torch)
        if a.mode == "fsdp":
            y = torch.empty(a.world << 20, device="cuda")
            dist.all_gather_into_tensor(y, x)
            dist.reduce_scatter_tensor(x[: (1 << 20) // a.world], x)
            stages["first_ag_rs"] = device_used(torch)
            del y
        del x
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        stages["after_probe_collectives"] = device_used(torch)
        bspec = spec if prec != "fsdp-bf16" else {**spec, "training": {**t, "precision": "fp32"}}
        if a.meta_init:
            if a.mode != "fsdp" or a.lora or a.ep > 1:
                raise SystemExit("--meta-init needs --mode fsdp, without --lora or --ep")
            # The buffers' values (position ids, inv_freq), from a twin
            # built on the host: on a fake group (a model too large for
            # one host, sharded over many ranks) a twin of two blocks, whose
            # model-level buffers are the same (a transformers config's cut
            # since the forty-fifth session: measure.build_hf had built the
            # whole model, and a whole Mixtral-8x7B exhausted the host).
            tspec = {**bspec, "model": {**bspec["model"], "layers": 2}} if fake else bspec
            twin, _ = measure.build(tspec, torch)
            host_buffers = {k: v.clone() for k, v in twin.named_buffers()}
            del twin
            with torch.device("meta"):
                model, kind = measure.build(bspec, torch)
        else:
            model, kind = measure.build(bspec, torch)
        if t["precision"] == "bf16":
            model = model.to(torch.bfloat16)
        model.train()
        if a.lora:
            model, rec["lora"] = apply_lora(a, spec, model, kind, t, torch)
        else:
            measure.enable_checkpointing(model, kind, t["checkpointing"], torch)
        ep_log = None
        if a.ep > 1:
            import ep
            group = None
            if a.mode == "fsdp":
                m2 = ep.mesh(a.ep)
                a.edp_mesh, group = m2["efsdp"], m2["ep"].get_group()
            ep_log = ep.apply(model, a.ep, a.router, group)
        rec["parameters"] = sum(p.numel() for p in model.parameters())
        if a.snapshot and a.snapshot_from < 0:
            # -1: the history from before the wrapping (fully_shard's moves
            # and shards, then the cache emptied), to the last step.
            torch.cuda.memory._record_memory_history(max_entries=400000, context="alloc", stacks="python")
        model, opt, info = wrap(a, model, kind, t, torch, rank)
        if a.meta_init:
            # Each shard allocated in place, in module order; the values
            # do not matter to memory, the buffers' do (embedding indices).
            model.to_empty(device=torch.device("cuda", rank))
            with torch.no_grad():
                for k, v in model.named_buffers():
                    if k in host_buffers:
                        v.copy_(host_buffers[k].to(v.dtype))
                for p in model.parameters():
                    p.normal_(0, 0.02)
            opt = measure.make_optimizer(t["optimizer"], trainable(model), torch)
        rec.update(info)
        rec["reserved_before_empty_cache"] = torch.cuda.memory_reserved()
        if a.mode == "fsdp" and not a.keep_cache:
            # Drop what the host-to-device move left cached (fully_shard moves
            # each whole parameter to the GPU before sharding it), as a
            # meta-device init would never have had it. DDP's construction
            # residue (the init broadcast's flat buffer) is real: kept.
            torch.cuda.empty_cache()
        stages["wrapped"] = device_used(torch)
        rec["allocated_after_wrap"] = torch.cuda.memory_allocated()
        rec["reserved_after_wrap"] = torch.cuda.memory_reserved()
        rec["param_bytes_local"] = sum(local_bytes(p) for p in model.parameters())
        B, S = t["batch"], t["seq"]
        g = torch.Generator(device="cuda").manual_seed(rank)
        ids = torch.randint(0, spec["model"]["vocab"], (B, S), device="cuda", generator=g)
        labels = ids.clone()
        amp = t["precision"].startswith("amp")
        steps = []
        for step in range(a.steps):
            # History from step 1 on (Adam state exists, caches warm) to the
            # last step: DDP rebuilds its buckets at step 1, and what that
            # leaves shows in the steps after it.
            if a.snapshot and step == a.snapshot_from:
                torch.cuda.memory._record_memory_history(max_entries=400000, context="alloc", stacks="python")
            torch.cuda.reset_peak_memory_stats()
            if steps:
                # Seconds from the end of the last step's optimizer (its
                # GPU work done) to this step's forward.
                steps[-1]["pause_after"] = round(time.time() - t_end, 3)
            if a.lag and step == 1 and rank == a.world - 1:
                time.sleep(a.lag)
            t0 = time.time()
            for _ in range(a.grad_accum_n):
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                    loss = model(input_ids=ids, labels=labels).loss
                loss.backward()
                del loss
            torch.cuda.synchronize()
            grad_bytes = sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if a.ep > 1 and a.router == "zero":
                ep.zero_routers(model)
            torch.cuda.synchronize()
            t_end = time.time()
            st = torch.cuda.memory_stats()
            steps.append({"max_allocated": torch.cuda.max_memory_allocated(),
                          "max_reserved": torch.cuda.max_memory_reserved(),
                          "allocated_end": torch.cuda.memory_allocated(),
                          "reserved_end": torch.cuda.memory_reserved(),
                          "device_used": device_used(torch),
                          "smi_used": None if a.no_pause else smi_used(os.getpid()),
                          "grad_bytes_after_backward": grad_bytes,
                          "alloc_retries": st.get("num_alloc_retries", 0),
                          "per_stream": per_stream(torch), "seconds": round(time.time() - t0, 3)})
            if a.snapshot and step == max(1, a.steps - 1):
                save_snapshot(torch, a.result, rank)
            if not a.no_pause:
                # The pause memplan's --step-pause 0.2 stands for
                # (estimate.PauseRecipe). nvidia-smi alone was not always
                # longer than NCCL's watchdog period: a twelfth-session run
                # raced DDP's rebuild on rank 0 (docs/multigpu.md).
                torch.cuda.synchronize()
                time.sleep(0.2)
        rec["steps"] = steps
        # FSDP2 creates its streams lazily, at the first forward.
        rec["stream_names"] = stream_names(torch, model) if a.mode == "fsdp" else \
            {str(torch.cuda.current_stream().cuda_stream): "default"}
        rec["optimizer_state_bytes"] = state_bytes(opt)
        if a.mode in ("ddp", "ddp-view", "zero1"):
            try:
                d = model._get_ddp_logging_data()
                rec["ddp"] = {k: d[k] for k in d if "bucket" in k or k in ("gradient_as_bucket_view",)}
            except Exception as e:  # noqa: BLE001
                rec["ddp"] = {"error": str(e)}
        if ep_log is not None:
            # Rows received per block per step, and the busiest share of the
            # whole run (every rank's maximum over the balanced rows), which
            # memplan's --ep-skew takes for random routing.
            rec["recv_rows"] = [[r, n] for _, r, n in ep_log]
            share = torch.tensor([max(r / n for _, r, n in ep_log)], device="cuda")
            dist.all_reduce(share, op=dist.ReduceOp.MAX)
            rec["ep_busiest_share"] = share.item()
            skew = "%.4f" % min(share.item() + 5e-5, a.ep)
            rec["memplan"] = rec["memplan"].replace("MEASURED", skew)
            rec["ep"], rec["router"], rec["ep_skew"] = a.ep, a.router, float(skew)
        rec["peak_allocated_bytes"] = max(s["max_allocated"] for s in steps)
        rec["peak_reserved_bytes"] = max(s["max_reserved"] for s in steps)
        rec["device_total_used_bytes"] = max(s["device_used"] for s in steps)
        rec["ok"] = True
    except torch.cuda.OutOfMemoryError as e:
        rec["ok"], rec["error"] = False, "OOM: " + str(e).split("\n")[0]
    except Exception as e:  # noqa: BLE001
        rec["ok"], rec["error"] = False, "%s: %s" % (type(e).__name__, str(e)[:500])
    finally:
        rec["stages"] = stages
        with open(out, "w") as f:
            json.dump(rec, f)
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


if __name__ == "__main__":
    main()
