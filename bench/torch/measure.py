#!/usr/bin/env python3
"""Measure real PyTorch training-memory peaks for a memplan spec.

    python3 bench/torch/measure.py SPEC [--batch N] [--seq N] [--precision P]
        [--optimizer O] [--checkpointing C] [--attention A] [--steps 3]
    python3 bench/torch/measure.py --params SPEC...

Builds the model the spec describes (transformers' GPT2LMHeadModel,
LlamaForCausalLM, BertForMaskedLM; torchvision's resnet and vit; the explicit
form's layers as torch.nn modules) with random weights, trains it for a few steps
the way transformers' Trainer does (loss from the model, outputs dropped
before backward), and prints one JSON line: the configuration, per step
max_memory_allocated, max_memory_reserved and the device memory in use from
the driver, and the GPU, driver, CUDA and torch versions. Run each
configuration in a fresh process (grid.sh does).
"""
import argparse, json, math, os, sys, time

import yaml


def load_spec(path, a):
    with open(path) as f:
        spec = yaml.safe_load(f)
    t = spec.setdefault("training", {})
    for k in ("batch", "seq", "image", "precision", "optimizer", "checkpointing", "attention", "zero_grad", "grad_accum",
              "dp", "zero"):
        v = getattr(a, k, None)
        if v is not None:
            t[k] = v
    t.setdefault("precision", "fp32")
    t.setdefault("optimizer", "adamw")
    t.setdefault("checkpointing", "none")
    t.setdefault("attention", "sdpa")
    t.setdefault("zero_grad", "none")
    t.setdefault("grad_accum", 1)
    return spec


def build_hf(path, attn, layers=None):
    """A transformers model from a config.json, with random weights; with
    layers, a cut of that many decoder layers (the per-layer lists of the
    config, such as layer_types, cut with it): train.py's twin on the host
    of a model built on the meta device, whose model-level buffers are the
    same (a whole Mixtral-8x7B built on the host, 188 GB in fp32, had the
    host kill the process: forty-fifth session, held-out set 88)."""
    import transformers
    with open(path) as f:
        cfg = json.load(f)
    if layers:
        cut_layers(cfg, layers)
    mt = cfg.pop("model_type")
    for k in ("architectures", "torch_dtype", "_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    # A released checkpoint's quantization (gpt-oss's MXFP4 experts) is
    # undone for training (Mxfp4Config(dequantize=True)): the model is
    # built in the run's dtype, as memplan simulates it.
    cfg.pop("quantization_config", None)
    config = transformers.AutoConfig.for_model(mt, **cfg)
    config._attn_implementation = attn
    if mt in ("bert", "roberta"):
        return transformers.AutoModelForMaskedLM.from_config(config), "mlm"
    return transformers.AutoModelForCausalLM.from_config(config), "causal"


def cut_layers(cfg, layers):
    """Cuts a transformers config (a dict, its text_config's where it has
    one) to its first layers decoder layers, in place: num_hidden_layers and
    every per-layer list (a list as long as the layers, such as
    layer_types)."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    n = text.get("num_hidden_layers")
    if n and layers < n:
        for k, v in list(text.items()):
            if isinstance(v, list) and len(v) == n:
                text[k] = v[:layers]
        text["num_hidden_layers"] = layers


def load_hf(path, a):
    """A pseudo-spec for a transformers config: the model comes from the
    config, the training setup from the flags (as memplan estimate --hf)."""
    with open(path) as f:
        cfg = json.load(f)
    spec = {"hf": path, "model": {"vocab": cfg.get("vocab_size")}, "training": {}}
    t = spec["training"]
    for k in ("batch", "seq", "precision", "optimizer", "checkpointing", "attention", "zero_grad", "grad_accum",
              "dp", "zero"):
        v = getattr(a, k, None)
        if v is not None:
            t[k] = v
    for k, v in (("batch", 1), ("precision", "amp-bf16"), ("optimizer", "adamw"), ("checkpointing", "none"),
                 ("attention", "sdpa"), ("zero_grad", "none"), ("grad_accum", 1)):
        t.setdefault(k, v)
    return spec


def build(spec, torch):
    m = spec["model"]
    if "hf" in spec:
        return build_hf(spec["hf"], "eager" if spec["training"]["attention"] == "eager" else "sdpa", m.get("layers"))
    t = spec["training"]
    typ = m["type"]
    attn = "eager" if t["attention"] == "eager" else "sdpa"
    if typ == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=m["layers"], n_embd=m["hidden"], n_head=m["heads"], vocab_size=m["vocab"],
                         n_positions=m.get("positions", 1024), n_inner=m.get("intermediate"),
                         tie_word_embeddings=m.get("tied", True), attn_implementation=attn)
        return GPT2LMHeadModel(cfg), "causal"
    if typ == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        h = m["hidden"]
        cfg = LlamaConfig(num_hidden_layers=m["layers"], hidden_size=h, intermediate_size=m["intermediate"],
                          num_attention_heads=m["heads"], num_key_value_heads=m.get("kv_heads", m["heads"]),
                          head_dim=m.get("head_dim", h // m["heads"]), vocab_size=m["vocab"],
                          tie_word_embeddings=m.get("tied", False), attention_bias=m.get("attention_bias", False),
                          mlp_bias=m.get("mlp_bias", False), max_position_embeddings=max(8192, t.get("seq", 0)),
                          attn_implementation=attn)
        if m.get("attention_bias"):
            # Qwen2 puts biases on q, k, v only.
            from transformers import Qwen2Config, Qwen2ForCausalLM
            cfg = Qwen2Config(num_hidden_layers=m["layers"], hidden_size=h, intermediate_size=m["intermediate"],
                              num_attention_heads=m["heads"], num_key_value_heads=m.get("kv_heads", m["heads"]),
                              vocab_size=m["vocab"], tie_word_embeddings=m.get("tied", False),
                              max_position_embeddings=max(8192, t.get("seq", 0)), attn_implementation=attn)
            return Qwen2ForCausalLM(cfg), "causal"
        return LlamaForCausalLM(cfg), "causal"
    if typ == "bert":
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(num_hidden_layers=m["layers"], hidden_size=m["hidden"], num_attention_heads=m["heads"],
                         intermediate_size=m.get("intermediate", 4 * m["hidden"]), vocab_size=m["vocab"],
                         max_position_embeddings=m.get("positions", 512), attn_implementation=attn)
        return BertForMaskedLM(cfg), "mlm"
    if typ == "resnet":
        import torchvision
        return getattr(torchvision.models, "resnet%d" % m["depth"])(num_classes=m.get("classes", 1000)), "image"
    if typ == "vit":
        import torchvision
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=t.get("image", 224), patch_size=m.get("patch", 16), num_layers=m["layers"],
                                 num_heads=m["heads"], hidden_dim=m["hidden"], mlp_dim=m.get("intermediate", 4 * m["hidden"]),
                                 num_classes=m.get("classes", 1000)), "image"
    if typ == "sequential":
        return Sequential(m["layers"], torch), "features"
    raise SystemExit("unsupported model type %s" % typ)


def Sequential(layers, torch):
    """The explicit form's layers as torch.nn modules (docs/spec.md)."""
    nn = torch.nn

    class Residual(nn.Module):
        def __init__(self, body, shortcut=None, inplace=False):
            super().__init__()
            self.body, self.shortcut, self.inplace = body, shortcut, inplace

        def forward(self, x):
            skip = self.shortcut(x) if self.shortcut is not None else x
            y = self.body(x)
            if self.inplace:
                y += skip
                return y
            return skip + y

    class Transpose(nn.Module):
        def forward(self, x):
            return x.transpose(1, 2)

    class Positions(nn.Module):
        def __init__(self, max_, dim):
            super().__init__()
            self.emb = nn.Embedding(max_, dim)

        def forward(self, x):
            return x + self.emb(torch.arange(x.shape[1], device=x.device))

    class TakeCls(nn.Module):
        def forward(self, x):
            return x[:, 0]

    class Attention(nn.Module):
        # style torch: nn.MultiheadAttention, as torchvision's ViT uses it.
        def __init__(self, a):
            super().__init__()
            if a.get("style") != "torch" or a.get("kv_heads", a["heads"]) != a["heads"] or a.get("rope"):
                raise SystemExit("measure.py: the explicit form's attention is built with style: torch only")
            self.causal = a.get("causal", False)
            self.mha = nn.MultiheadAttention(a["dim"], a["heads"], dropout=a.get("p", 0.0), bias=a.get("bias", False),
                                             batch_first=True)

        def forward(self, x):
            mask = None
            if self.causal:
                n = x.shape[1]
                mask = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            return self.mha(x, x, x, need_weights=False, attn_mask=mask, is_causal=self.causal)[0]

    def simple(kind, a):
        if kind == "linear":
            return nn.Linear(a["in"], a["out"], bias=a.get("bias", True))
        if kind == "relu":
            return nn.ReLU(inplace=a.get("inplace", False))
        if kind == "gelu":
            return nn.GELU()
        if kind == "silu":
            return nn.SiLU()
        if kind == "tanh":
            return nn.Tanh()
        if kind == "dropout":
            return nn.Dropout(a["p"])
        if kind == "flatten":
            return nn.Flatten()
        if kind == "conv2d":
            return nn.Conv2d(a["in"], a["out"], a["kernel"], stride=a.get("stride", 1), padding=a.get("padding", 0),
                             bias=a.get("bias", True))
        if kind == "conv1d":
            return nn.Conv1d(a["in"], a["out"], a["kernel"], stride=a.get("stride", 1), padding=a.get("padding", 0),
                             bias=a.get("bias", True))
        if kind == "batchnorm2d":
            return nn.BatchNorm2d(a["channels"])
        if kind == "groupnorm":
            return nn.GroupNorm(a["groups"], a["channels"], affine=a.get("affine", True))
        if kind == "layernorm":
            return nn.LayerNorm(a["dim"], bias=a.get("bias", True))
        if kind == "maxpool2d":
            return nn.MaxPool2d(a["kernel"], stride=a.get("stride", a["kernel"]), padding=a.get("padding", 0))
        if kind == "avgpool":
            return nn.AdaptiveAvgPool2d(1)
        if kind == "transpose":
            return Transpose()
        if kind == "positions":
            return Positions(a["max"], a["dim"])
        if kind == "take_cls":
            return TakeCls()
        if kind == "attention":
            return Attention(a)
        raise SystemExit("measure.py: layer %s not supported" % kind)

    def make(ls):
        mods = []
        for l in ls:
            kind, args = (l, {}) if isinstance(l, str) else next(iter(l.items()))
            args = args or {}
            if kind == "residual":
                body = args if isinstance(args, list) else args["layers"]
                short = None if isinstance(args, list) or "shortcut" not in args else make(args["shortcut"])
                inplace = False if isinstance(args, list) else args.get("inplace", False)
                mods.append(Residual(make(body), short, inplace))
            elif kind == "block":
                blk = make(args if isinstance(args, list) else args["layers"])
                blk.memplan_unit = True
                mods.append(blk)
            elif kind == "repeat":
                for _ in range(args["times"]):
                    blk = make(args["layers"])
                    blk.memplan_unit = True
                    mods.append(blk)
            else:
                mods.append(simple(kind, args))
        return nn.Sequential(*mods)

    return make(layers)


def units_of(model, kind):
    """The checkpointing units: what memplan's checkpointing applies to."""
    if kind == "image" and hasattr(model, "layer1"):
        return [(blk_parent, i) for blk_parent in (model.layer1, model.layer2, model.layer3, model.layer4)
                for i in range(len(blk_parent))]
    if kind == "image":
        return [(model.encoder.layers, i) for i in range(len(model.encoder.layers))]
    return [(model, i) for i, mod in enumerate(model) if getattr(mod, "memplan_unit", False)]


def enable_checkpointing(model, kind, mode, torch):
    from torch.utils.checkpoint import checkpoint
    if mode == "none":
        return
    if kind in ("causal", "mlm"):
        if mode != "every-block":
            raise SystemExit("transformers models checkpoint every block only")
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return

    class Ckpt(torch.nn.Module):
        def __init__(self, mods):
            super().__init__()
            self.mods = torch.nn.Sequential(*mods)

        def forward(self, x):
            return checkpoint(self.mods, x, use_reentrant=False)

    units = units_of(model, kind)
    n = len(units)
    if mode == "every-block":
        groups, last_plain = [[u] for u in units], False
    elif mode.startswith("every-"):
        k = int(mode.split("-")[1])
        groups, last_plain = [units[i:i + k] for i in range(0, n, k)], False
    elif mode == "sqrt":
        segs = max(1, round(math.sqrt(n)))
        size = n // segs
        groups = [units[i:i + size] for i in range(0, size * (segs - 1), size)]
        groups.append(units[size * (segs - 1):])
        last_plain = True
    for gi, g in enumerate(groups):
        if last_plain and gi == len(groups) - 1:
            continue
        parent, first = g[0]
        mods = [parent[i] for (_, i) in g]
        parent[first] = Ckpt(mods)
        for (_, i) in g[1:]:
            parent[i] = torch.nn.Identity()


def shard(model, kind, dp, zero, optimizer, torch, keep_cache=False, upcast=False, ram_efficient=False):
    """One rank of a data-parallel job on this GPU: a fake process group of
    dp ranks (collectives do nothing, but every buffer the wrappers
    allocate is real). ZeRO 0 is DistributedDataParallel, 1
    ZeroRedundancyOptimizer over DDP, 2 and 3 FSDP2's fully_shard on every
    block and the root, keeping or freeing the gathered parameters after
    forward, then (upcast) the sharded parameters cast to fp32 as
    accelerate's fsdp2_prepare_model casts a model loaded in bf16 under
    mixed precision (model.to(torch.float32)), then the cache emptied
    unless keep_cache (memplan's empty_cache_after_wrap). With
    ram_efficient, accelerate's cpu_ram_efficient_loading: the host model
    moved to the meta device and sharded there, then each full parameter
    moved to the GPU and scattered by accelerate's own
    fsdp2_load_full_state_dict (as rank 0 runs it), the non-persistent
    buffers registered again on the GPU."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=dp)
    if zero <= 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[0])

        # The fake group's all-reduce completes with no result, which DDP's
        # reducer rejects: hand the bucket back as if reduced.
        def hook(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        model.register_comm_hook(None, hook)
        if zero == 0:
            return model, make_optimizer(optimizer, model.parameters(), torch)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        proto = make_optimizer(optimizer, [torch.nn.Parameter(torch.zeros(1, device="cuda"))], torch)
        kw = {k: v for k, v in proto.defaults.items() if k in ("lr", "foreach", "fused", "momentum", "weight_decay")}
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=type(proto), **kw)
    from torch.distributed.fsdp import fully_shard
    blocks = None
    for _, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) > 1:
            blocks = list(mod)
            break
    if blocks is None and kind == "image" and hasattr(model, "layer1"):
        blocks = [b for l in (model.layer1, model.layer2, model.layer3, model.layer4) for b in l]
    if ram_efficient:
        # accelerate's fsdp2_prepare_model with cpu_ram_efficient_loading.
        import copy
        original_sd = model.state_dict()
        # The non-persistent buffers (accelerate's get_non_persistent_buffers).
        names = {f"{p}.{n}" if p else n for p, m in model.named_modules() for n in m._non_persistent_buffers_set}
        buffers = copy.deepcopy({k: v for k, v in model.named_buffers() if k in names})
        model = model.to(torch.device("meta"))
        if hasattr(model, "tie_weights"):
            model.tie_weights()
    for b in blocks or []:
        fully_shard(b, reshard_after_forward=zero == 3)
    fully_shard(model, reshard_after_forward=zero == 3)
    if ram_efficient:
        from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict

        class Rank0:
            is_main_process = True
            device = torch.device("cuda")

        fsdp2_load_full_state_dict(Rank0(), model, original_sd)
        for fqn, b in buffers.items():
            parent, _, name = fqn.rpartition(".")
            (model.get_submodule(parent) if parent else model).register_buffer(name, b.to("cuda"), persistent=False)
        if hasattr(model, "tie_weights"):
            model.tie_weights()
    # fully_shard replaced each whole parameter, built on this GPU (or moved
    # to it unit by unit, --host-init), by its shard: drop the whole ones'
    # cached blocks, as a meta-device init never has them (dist/train.py
    # does the same; until 2026-11-23's sixth session this harness kept
    # them, as --keep-cache does, and as accelerate's fsdp2_prepare_model
    # leaves them).
    if upcast:
        model = model.to(torch.float32)
    if not keep_cache:
        torch.cuda.empty_cache()
    return model, make_optimizer(optimizer, model.parameters(), torch)


def make_optimizer(name, params, torch):
    impl = "foreach"
    for suf in ("foreach", "fused", "for-loop"):
        if name.endswith("-" + suf):
            impl, name = suf, name[: -len(suf) - 1]
    kw = {"foreach": impl == "foreach", "fused": impl == "fused"} if impl != "for-loop" else {"foreach": False}
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **kw)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2)
    raise SystemExit("optimizer %s cannot be measured here" % name)


def versions(torch):
    v = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name()}
    try:
        import pynvml
        pynvml.nvmlInit()
        v["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as e:  # noqa: BLE001
        v["driver"] = "unknown (%s)" % e
    try:
        import transformers
        v["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        pass
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec", nargs="+")
    ap.add_argument("--params", action="store_true", help="only count parameters (meta device)")
    ap.add_argument("--hf", action="store_true", help="the arguments are transformers config.json files, not specs")
    for k in ("batch", "seq", "image", "grad_accum", "dp", "zero"):
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=int)
    for k in ("precision", "optimizer", "checkpointing", "attention", "zero_grad"):
        ap.add_argument("--" + k.replace("_", "-"), dest=k)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--label", default="")
    ap.add_argument("--phases", action="store_true", help="record allocated memory at each phase of each step")
    ap.add_argument("--trace", help="write the allocator's alloc/free events (JSON) to this file")
    ap.add_argument("--fraction", type=float, help="torch.cuda.set_per_process_memory_fraction")
    ap.add_argument("--keep-cache", action="store_true",
                    help="with --zero 2 or 3: leave the cache as fully_shard left it (memplan's default; "
                         "without, the cache is emptied after wrapping: --empty-cache-after-wrap)")
    ap.add_argument("--host-init", action="store_true",
                    help="with --zero 2 or 3: keep the model on the host until fully_shard moves each unit "
                         "(memplan's --fsdp-init host; without, model.cuda() first: --fsdp-init gpu)")
    ap.add_argument("--ram-efficient", dest="ram_efficient", action="store_true",
                    help="with --zero 2 or 3 and --host-init: accelerate's cpu_ram_efficient_loading (sharded on the "
                         "meta device, then each full parameter moved to the GPU and scattered; accelerate's own "
                         "fsdp2_load_full_state_dict)")
    ap.add_argument("--load-dtype", dest="load_dtype", choices=["bf16"],
                    help="with --zero 2 or 3 and an AMP precision: the model is loaded in bf16 and its sharded "
                         "parameters cast to fp32 after fully_shard, as accelerate's fsdp2_prepare_model does "
                         "(memplan's upcast_after_wrap)")
    ap.add_argument("--alloc-conf", dest="alloc_conf",
                    help="PYTORCH_ALLOC_CONF for this run, set before torch initialises CUDA")
    a = ap.parse_args()
    if a.alloc_conf is not None:
        # PYTORCH_ALLOC_CONF wins over PYTORCH_CUDA_ALLOC_CONF
        # (c10/core/AllocatorConfig.cpp); drop the older one so that the
        # record says what ran.
        os.environ["PYTORCH_ALLOC_CONF"] = a.alloc_conf
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    conf = os.environ.get("PYTORCH_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    import torch

    if a.params:
        for p in a.spec:
            spec = load_hf(p, a) if a.hf else load_spec(p, a)
            with torch.device("meta"):
                model, _ = build(spec, torch)
            print(json.dumps({"spec": p, "hf": bool(a.hf), "parameters": sum(x.numel() for x in model.parameters())}),
                  flush=True)
        return

    spec = load_hf(a.spec[0], a) if a.hf else load_spec(a.spec[0], a)
    t = spec["training"]
    if conf:
        t["alloc_conf"] = conf
    rec = {"spec": a.spec[0], "hf": bool(a.hf), "label": a.label, "training": t, "date": time.strftime("%Y-%m-%d"),
           **versions(torch)}
    free0, total = torch.cuda.mem_get_info()
    rec["device_total_bytes"] = total
    if a.fraction:
        torch.cuda.set_per_process_memory_fraction(a.fraction)
    if a.trace:
        if os.environ.get("MEASURE_TRACE_FRAMES", "1") == "0":
            # Python frames off: torch 2.11 fails GPT-2's dropout backward
            # ("returned NULL without setting an exception") while
            # recording them; the events are the same without.
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)
        else:
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    try:
        model, kind = build(spec, torch)
        prec = t["precision"]
        if prec == "bf16":
            # Cast on the host, as loading a checkpoint in bf16 does:
            # model.cuda().bfloat16() would leave the fp32 copies' blocks
            # cached in the allocator.
            model = model.to(torch.bfloat16)
        dp, zero = t.get("dp") or 1, t.get("zero") or 0
        fsdp = (dp > 1 or zero > 0) and zero >= 2
        upcast = fsdp and a.load_dtype == "bf16"
        if a.load_dtype and not (upcast and prec.startswith("amp-")):
            raise SystemExit("--load-dtype needs --zero 2 or 3 and an AMP precision")
        if upcast:
            # Loaded in bf16 (on the host, as a bf16 checkpoint loads);
            # shard() casts the shards to fp32 after wrapping.
            model = model.to(torch.bfloat16)
            t["upcast_after_wrap"] = True
        if fsdp:
            # How the model reached fully_shard, and whether the cache was
            # emptied after (bench.Record.Overrides reads both).
            t["fsdp_init"] = "host" if a.host_init else "gpu"
            t["empty_cache_after_wrap"] = not a.keep_cache
            if a.ram_efficient:
                if not a.host_init:
                    raise SystemExit("--ram-efficient needs --host-init")
                t["fsdp_load"] = "ram-efficient"
        if not (fsdp and a.host_init):
            model = model.cuda()
        model.train()
        enable_checkpointing(model, kind, t["checkpointing"], torch)
        rec["parameters"] = sum(p.numel() for p in model.parameters())
        if dp > 1 or zero > 0:
            model, opt = shard(model, kind, dp, zero, t["optimizer"], torch, a.keep_cache, upcast, a.ram_efficient)
        else:
            opt = make_optimizer(t["optimizer"], model.parameters(), torch)
        B = t["batch"]
        dev = "cuda"
        if kind in ("causal", "mlm"):
            ids = torch.randint(0, spec["model"]["vocab"], (B, t["seq"]), device=dev)
            labels = ids.clone()
            fwd = lambda: model(input_ids=ids, labels=labels).loss
        else:
            if kind == "image":
                x = torch.randn(B, 3, t.get("image", 224), t.get("image", 224), device=dev)
                classes = spec["model"].get("classes", 1000)
            else:
                inp = spec["model"]["input"]
                if "signal" in inp:
                    x = torch.randn(B, inp["signal"]["channels"], t["seq"], device=dev)
                elif "image" in inp:
                    c = (inp["image"] or {}).get("channels", 3)
                    x = torch.randn(B, c, t.get("image", 224), t.get("image", 224), device=dev)
                else:
                    x = torch.randn(B, inp["features"], device=dev)
                last = spec["model"]["layers"][-1]
                classes = next(iter(last.values()))["out"]
            if prec == "bf16":
                x = x.to(torch.bfloat16)
            y = torch.randint(0, classes, (B,), device=dev)
            fwd = lambda: torch.nn.functional.cross_entropy(model(x), y)
        amp = prec.startswith("amp")
        adt = torch.float16 if prec == "amp-fp16" else torch.bfloat16
        scaler = torch.amp.GradScaler("cuda") if prec == "amp-fp16" else None
        steps = []
        mark = lambda: (torch.cuda.synchronize(), torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())[1:]
        for step in range(a.steps):
            torch.cuda.reset_peak_memory_stats()
            t0 = time.time()
            ph = []
            for _ in range(t.get("grad_accum", 1)):
                if a.phases:
                    torch.cuda.reset_peak_memory_stats()
                with torch.autocast("cuda", dtype=adt, enabled=amp):
                    loss = fwd()
                if a.phases:
                    ph.append(("forward",) + mark())
                    torch.cuda.reset_peak_memory_stats()
                (scaler.scale(loss) if scaler else loss).backward()
                if a.phases:
                    ph.append(("backward",) + mark())
                    torch.cuda.reset_peak_memory_stats()
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=t.get("zero_grad", "none") == "none")
            torch.cuda.synchronize()
            if a.phases:
                ph.append(("optimizer",) + mark())
            free, _ = torch.cuda.mem_get_info()
            steps.append({"max_allocated": torch.cuda.max_memory_allocated(),
                          "max_reserved": torch.cuda.max_memory_reserved(),
                          "device_used": total - free, "seconds": round(time.time() - t0, 3)})
            if a.phases:
                steps[-1]["phases"] = [{"stage": p[0], "end_allocated": p[1], "peak_allocated": p[2]} for p in ph]
        rec["steps"] = steps
        rec["peak_allocated_bytes"] = max(s["max_allocated"] for s in steps)
        rec["peak_reserved_bytes"] = max(s["max_reserved"] for s in steps)
        rec["device_total_used_bytes"] = max(s["device_used"] for s in steps)
        rec["context_bytes_before_model"] = total - free0
        rec["ok"] = True
    except torch.cuda.OutOfMemoryError as e:
        rec["ok"], rec["error"] = False, "OOM: " + str(e).split("\n")[0]
    finally:
        if a.trace:
            write_trace(a.trace, torch)
    print(json.dumps(rec), flush=True)


def write_trace(path, torch):
    """The allocator's history as JSON: one [action, addr, size, top frame]
    per event, the top frame outside torch/utils (lora.py and moe_trace.py
    write theirs with this too), with " sN" after it for a block on a side
    stream (N the stream's handle, as bench/torch/dist/snap2events.py
    writes it: FSDP2's all-gathers and reduce-scatters; alloc's
    TestReplayDebug and bisect.py read it)."""
    snap = torch.cuda.memory._snapshot()
    ev = []
    for e in snap["device_traces"][0]:
        fr = e.get("frames") or []
        top = next((f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in fr
                    if "torch/utils" not in f["filename"]), "")
        if e.get("stream"):
            top += " s%d" % e["stream"]
        ev.append([e["action"], e.get("addr", 0), e.get("size", 0), top])
    with open(path, "w") as f:
        json.dump(ev, f)


if __name__ == "__main__":
    main()
