#!/usr/bin/env python3
"""Measure real PyTorch memory peaks of LoRA fine-tuning with peft.

    python3 bench/torch/lora.py SPEC [--hf] [--batch N] [--seq N]
        [--precision amp-bf16|bf16|fp32] [--checkpointing none|every-block]
        [--rank R] [--alpha A] [--dropout P] [--targets attn|mlp|all|NAME,...]
        [--input-grads auto|on|off] [--adapter-dtype fp32|base]
        [--optimizer adamw|adamw-fused|adamw-for-loop] [--steps 3] [--label L]

Builds the model the spec (or, with --hf, the transformers config.json)
describes with bench/torch/measure.py's builders, directly on the GPU in the
base dtype (fp32 for amp-bf16 and fp32, bf16 for bf16: random weights, one
allocation per parameter, as loading a checkpoint gives), freezes it and
wraps it with peft's LoraConfig / get_peft_model. peft keeps the adapters in
fp32 over a bf16 base unless --adapter-dtype base (autocast_adapter_dtype=False).

Targets: attn and mlp are resolved per model family to the projection names
transformers uses (Llama/Qwen/Mistral q_proj,k_proj,v_proj,o_proj and
gate_proj,up_proj,down_proj; GPT-2 attn.c_attn, attn.c_proj and mlp.c_fc,
mlp.c_proj, which are Conv1D; BERT query,key,value,attention.output.dense and
intermediate.dense,output.dense); all is peft's "all-linear" (every Linear
and Conv1D except the output embedding); anything else is a comma-separated
list passed to peft as is (suffix match).

With --checkpointing every-block it calls gradient_checkpointing_enable
(use_reentrant=False) after wrapping; --input-grads auto then also calls
enable_input_require_grads() (the hook that makes the embedding output
require grad), as get_peft_model does by itself when checkpointing was
enabled before it, and as prepare_model_for_kbit_training does.

Trains a few steps the way transformers' Trainer does (AdamW over the
trainable parameters only, loss from the model, outputs dropped before
backward, zero_grad(set_to_none=True)) and prints one JSON line like
measure.py: the configuration, trainable and frozen parameter counts as peft
reports them (get_nb_trainable_parameters), per-step max_memory_allocated,
max_memory_reserved and device memory in use, and versions. Run each
configuration in a fresh process (grid-lora.sh does).

bitsandbytes (4-bit and 8-bit bases, paged 8-bit AdamW) is not installed on
the GPU machines: those configurations cannot be measured here.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402  (the builders and helpers of bench/torch/measure.py)

# Projection names per family: (attention, mlp). A name is matched by peft
# as the full module name or its dotted suffix.
FAMILIES = {
    "llama": (["q_proj", "k_proj", "v_proj", "o_proj"], ["gate_proj", "up_proj", "down_proj"]),
    "gpt2": (["attn.c_attn", "attn.c_proj"], ["mlp.c_fc", "mlp.c_proj"]),
    "bert": (["query", "key", "value", "attention.output.dense"], ["intermediate.dense", "output.dense"]),
    "starcoder2": (["q_proj", "k_proj", "v_proj", "o_proj"], ["mlp.c_fc", "mlp.c_proj"]),
    "phi": (["q_proj", "k_proj", "v_proj", "self_attn.dense"], ["fc1", "fc2"]),
    # Phi-3's fused projections (before the twenty-eighth session Phi-3 took
    # Llama's names, of which only o_proj matched).
    "phi3": (["qkv_proj", "o_proj"], ["gate_up_proj", "down_proj"]),
    # GPT-OSS's experts and router are parameters, not Linear modules:
    # no MLP names.
    "gpt_oss": (["q_proj", "k_proj", "v_proj", "o_proj"], []),
    # DeepSeek's latent attention (q_proj, or q_a_proj and q_b_proj) and
    # the MLPs of its dense first layers and shared experts (the router,
    # mlp.gate, is a parameter; gate_proj does not match it).
    "deepseek": (["q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"],
                 ["gate_proj", "up_proj", "down_proj"]),
    # Qwen2-MoE's shared expert (its experts are fused parameters; its
    # one-output shared_expert_gate only all-linear takes).
    "qwen2_moe": (["q_proj", "k_proj", "v_proj", "o_proj"], ["gate_proj", "up_proj", "down_proj"]),
}
FAMILY_OF = {"llama": "llama", "qwen2": "llama", "qwen3": "llama", "mistral": "llama", "gemma": "llama",
             "gemma2": "llama", "phi3": "phi3", "olmo": "llama", "olmo2": "llama", "olmo3": "llama", "granite": "llama",
             "smollm3": "llama", "starcoder2": "starcoder2", "phi": "phi", "cohere": "llama", "gpt_oss": "gpt_oss",
             "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "qwen2_moe": "qwen2_moe", "llama4_text": "llama",
             "gpt2": "gpt2", "bert": "bert", "roberta": "bert"}


def family(spec, model):
    mt = getattr(getattr(model, "config", None), "model_type", None) or spec["model"].get("type")
    f = FAMILY_OF.get(mt)
    if f is None:
        raise SystemExit("lora.py: no target names for model type %s; pass --targets NAME,..." % mt)
    return f


def resolve_targets(arg, spec, model):
    """peft's target_modules for --targets, and the names of the modules it
    selects (filled in after wrapping)."""
    if arg == "all":
        return "all-linear"
    if arg in ("attn", "mlp"):
        attn, mlp = FAMILIES[family(spec, model)]
        names = attn if arg == "attn" else mlp
        if family(spec, model) == "bert" and arg == "mlp":
            # BERT's "output.dense" also ends attention.output.dense: name
            # the MLP's output projection by its full path.
            return [n for n, _ in model.named_modules()
                    if n.endswith("intermediate.dense") or (n.endswith("output.dense") and "attention" not in n)]
        return names
    return [t.strip() for t in arg.split(",") if t.strip()]


def count(model, torch):
    """Parameters and bytes, trainable and frozen, by dtype."""
    out = {"trainable": 0, "frozen": 0, "trainable_bytes": 0, "frozen_bytes": 0, "dtypes": {}}
    seen = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        k = "trainable" if p.requires_grad else "frozen"
        out[k] += p.numel()
        out[k + "_bytes"] += p.numel() * p.element_size()
        key = "%s %s" % (k, str(p.dtype).replace("torch.", ""))
        out["dtypes"][key] = out["dtypes"].get(key, 0) + p.numel()
    return out


def build_lora(spec, a, torch):
    import peft
    t = spec["training"]
    prec = t["precision"]
    base_dt = torch.bfloat16 if prec == "bf16" else torch.float32
    # Build on the GPU in the base dtype: fast for 7B models, and each
    # parameter is one allocation of its final size, as from_pretrained
    # with torch_dtype gives.
    old = torch.get_default_dtype()
    torch.set_default_dtype(base_dt)
    try:
        with torch.device("cuda"):
            model, kind = measure.build(spec, torch)
    finally:
        torch.set_default_dtype(old)
    if any(p.dtype != base_dt for p in model.parameters()):
        # A transformers version that picks the dtype itself: cast, and let
        # empty_cache below drop the originals' blocks.
        model.to(base_dt)
    if kind not in ("causal", "mlm"):
        raise SystemExit("lora.py measures transformers models only")
    model.train()
    if t["checkpointing"] not in ("none", "every-block"):
        raise SystemExit("transformers models checkpoint every block only")
    targets = resolve_targets(a.targets, spec, model)
    alpha = a.alpha if a.alpha is not None else a.rank
    alpha = int(alpha) if float(alpha).is_integer() else alpha
    cfg = peft.LoraConfig(r=a.rank, lora_alpha=alpha, lora_dropout=a.dropout, target_modules=targets, bias="none")
    # Wrap first: PeftModel.__init__ calls enable_input_require_grads()
    # itself when the model already checkpoints (peft_model.py,
    # _prepare_model_for_gradient_checkpointing), which would make
    # --input-grads off impossible. The hook is added below per the flag.
    model = peft.get_peft_model(model, cfg, autocast_adapter_dtype=a.adapter_dtype == "fp32")
    base = model.get_base_model()
    if t["checkpointing"] == "every-block":
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    input_grads = a.input_grads == "on" or (a.input_grads == "auto" and t["checkpointing"] != "none")
    if input_grads:
        base.enable_input_require_grads()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    lora_modules = sorted(n for n, m in model.named_modules() if hasattr(m, "lora_A") and len(m.lora_A) > 0)
    return model, kind, targets, lora_modules, input_grads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--hf", action="store_true", help="SPEC is a transformers config.json")
    for k in ("batch", "seq"):
        ap.add_argument("--" + k, dest=k, type=int)
    ap.add_argument("--precision", choices=("amp-bf16", "bf16", "fp32"))
    ap.add_argument("--optimizer")
    ap.add_argument("--checkpointing", choices=("none", "every-block"))
    ap.add_argument("--attention", choices=("sdpa", "eager"))
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--targets", default="attn")
    ap.add_argument("--input-grads", dest="input_grads", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--adapter-dtype", dest="adapter_dtype", choices=("fp32", "base"), default="fp32")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--label", default="")
    ap.add_argument("--trace", help="write the allocator's events (action, addr, size, top frame) to this JSON file")
    a = ap.parse_args()
    # measure.py's loaders read these attributes.
    for k in ("image", "zero_grad", "grad_accum", "dp", "zero"):
        setattr(a, k, None)
    import torch

    spec = measure.load_hf(a.spec, a) if a.hf else measure.load_spec(a.spec, a)
    t = spec["training"]
    if t["precision"] not in ("amp-bf16", "bf16", "fp32"):
        raise SystemExit("lora.py: precision %s not measured" % t["precision"])
    rec = {"spec": a.spec, "hf": a.hf, "label": a.label, "training": t, "date": time.strftime("%Y-%m-%d"),
           "lora": {"rank": a.rank, "alpha": a.alpha if a.alpha is not None else a.rank, "dropout": a.dropout,
                    "targets": a.targets, "adapter_dtype": a.adapter_dtype},
           **measure.versions(torch)}
    try:
        import peft
        rec["peft"] = peft.__version__
    except ImportError as e:
        raise SystemExit("lora.py needs peft: %s" % e)
    free0, total = torch.cuda.mem_get_info()
    rec["device_total_bytes"] = total
    rec["context_bytes_before_model"] = total - free0
    if a.trace:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    try:
        model, kind, targets, lora_modules, input_grads = build_lora(spec, a, torch)
        rec["lora"]["target_modules"] = targets if isinstance(targets, str) else list(targets)
        rec["lora"]["modules"] = len(lora_modules)
        rec["lora"]["module_names_sample"] = lora_modules[:8]
        rec["lora"]["input_require_grads"] = input_grads
        trainable, total_params = model.get_nb_trainable_parameters()
        rec["peft_trainable_parameters"] = trainable
        rec["peft_all_parameters"] = total_params
        rec["peft_frozen_parameters"] = total_params - trainable
        rec["parameters"] = count(model, torch)
        rec["setup_allocated_bytes"] = torch.cuda.memory_allocated()
        rec["setup_reserved_bytes"] = torch.cuda.memory_reserved()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = measure.make_optimizer(t["optimizer"], params, torch)
        B, S = t["batch"], t["seq"]
        ids = torch.randint(0, spec["model"]["vocab"], (B, S), device="cuda")
        labels = ids.clone()
        amp = t["precision"] == "amp-bf16"
        steps = []
        for _ in range(a.steps):
            torch.cuda.reset_peak_memory_stats()
            t0 = time.time()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
            torch.cuda.synchronize()
            free, _ = torch.cuda.mem_get_info()
            steps.append({"max_allocated": torch.cuda.max_memory_allocated(),
                          "max_reserved": torch.cuda.max_memory_reserved(),
                          "device_used": total - free, "end_allocated": torch.cuda.memory_allocated(),
                          "seconds": round(time.time() - t0, 3)})
        rec["steps"] = steps
        rec["peak_allocated_bytes"] = max(s["max_allocated"] for s in steps)
        rec["peak_reserved_bytes"] = max(s["max_reserved"] for s in steps)
        rec["device_total_used_bytes"] = max(s["device_used"] for s in steps)
        rec["ok"] = True
    except torch.cuda.OutOfMemoryError as e:
        rec["ok"], rec["error"] = False, "OOM: " + str(e).split("\n")[0]
    finally:
        if a.trace:
            measure.write_trace(a.trace, torch)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
