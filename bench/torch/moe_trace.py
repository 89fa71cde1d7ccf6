#!/usr/bin/env python3
"""Allocator trace of one mixture-of-experts training step, with what routed.

    python3 bench/torch/moe_trace.py OUTDIR [--config model/testdata/hf/tiny-qwen3-moe.json]
        [--batch 4] [--seq 1024] [--precision amp-bf16|bf16] [--checkpointing none|every-block]
        [--experts default|eager|grouped_mm|batched_mm] [--steps 3] [--alloc-conf CONF]

Builds the transformers model from the config exactly as measure.py does
(random weights, random input ids, AdamW, the same training loop), and writes
into OUTDIR:

  run.json        versions, the experts implementation transformers chose
                  (config._experts_implementation), per-step max allocated /
                  reserved, and per MoE layer and step the number of routed
                  (token, slot) pairs each expert received (from a forward
                  hook on each router);
  source.txt      the source of the functions that ran: the sparse block's,
                  the router's and the experts' forward (the dispatched
                  implementation), so that the model memplan simulates can be
                  checked against the transformers version that ran;
  events.json     the allocator's alloc/free events of the whole run as
                  [action, addr, size, top frame outside torch/utils] (as
                  measure.py --trace writes);
  snapshot.pickle torch.cuda.memory._dump_snapshot (segments, blocks, stacks),
                  for https://pytorch.org/memory_viz.

Run it in a fresh process per configuration. Needs a CUDA GPU.
"""
import argparse, inspect, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def routers(model):
    """The router module of each sparse MoE block, by name."""
    out = []
    for name, m in model.named_modules():
        if type(m).__name__.endswith("SparseMoeBlock"):
            out.append((name, m, m.gate))
    return out


def source_of(fn):
    try:
        return inspect.getsource(fn)
    except (TypeError, OSError) as e:
        return f"<no source: {e}>"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--config", default="model/testdata/hf/tiny-qwen3-moe.json")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precision", default="amp-bf16")
    ap.add_argument("--checkpointing", default="none")
    ap.add_argument("--experts", default="default", help="config._experts_implementation to force (default: transformers' choice)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--alloc-conf", dest="alloc_conf")
    a = ap.parse_args()
    if a.alloc_conf is not None:
        os.environ["PYTORCH_ALLOC_CONF"] = a.alloc_conf
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    os.makedirs(a.out, exist_ok=True)
    import torch
    import transformers
    import measure

    rec = {"config": a.config, "batch": a.batch, "seq": a.seq, "precision": a.precision,
           "checkpointing": a.checkpointing, "experts_requested": a.experts, "alloc_conf": a.alloc_conf,
           "date": time.strftime("%Y-%m-%d"), **measure.versions(torch)}
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    model, kind = measure.build_hf(a.config, "sdpa")
    if a.experts != "default":
        model.config._experts_implementation = a.experts
        for m in model.modules():
            if hasattr(m, "config") and hasattr(m.config, "_experts_implementation"):
                m.config._experts_implementation = a.experts
    blocks = routers(model)
    impl = getattr(model.config, "_experts_implementation", None)
    rec["experts_implementation"] = impl
    rec["moe_layers"] = len(blocks)
    with open(os.path.join(a.out, "source.txt"), "w") as f:
        if blocks:
            name, blk, gate = blocks[0]
            f.write(f"# {type(blk).__module__}.{type(blk).__name__}.forward\n{source_of(type(blk).forward)}\n")
            f.write(f"# {type(gate).__module__}.{type(gate).__name__}.forward\n{source_of(type(gate).forward)}\n")
            ex = blk.experts
            f.write(f"# {type(ex).__module__}.{type(ex).__name__}.forward (wrapper)\n{source_of(type(ex).forward)}\n")
            try:
                from transformers.integrations import moe as hfmoe
                fn = hfmoe.ALL_EXPERTS_FUNCTIONS.get(impl, None) if impl not in (None, "eager") else None
                if fn is not None:
                    f.write(f"# dispatched: {fn.__module__}.{fn.__name__}\n{source_of(fn)}\n")
                    f.write(f"# transformers.integrations.moe (whole module)\n{source_of(hfmoe)}\n")
            except Exception as e:  # noqa: BLE001
                f.write(f"# transformers.integrations.moe: {e}\n")
            orig = getattr(type(ex).forward, "__wrapped__", None)
            if orig is not None:
                f.write(f"# eager experts forward\n{source_of(orig)}\n")
    counts = []  # per step, per layer: list of per-expert counts

    ne = getattr(model.config, "num_experts", None) or getattr(model.config, "num_local_experts", 0)

    def hook(layer):
        def h(mod, inp, out):
            # transformers 5's routers return (logits, scores, indices); a 4.x
            # gate is a Linear returning the logits (top-k taken in the block).
            outs = out if isinstance(out, tuple) else (out,)
            idx = [t for t in outs if torch.is_tensor(t) and not t.is_floating_point()]
            if not idx:
                idx = [torch.topk(outs[0].float(), model.config.num_experts_per_tok, dim=-1).indices]
            counts[-1][layer] = torch.bincount(idx[0].reshape(-1), minlength=ne).tolist()
        return h

    for i, (_, _, gate) in enumerate(blocks):
        gate.register_forward_hook(hook(i))
    if a.precision == "bf16":
        model = model.to(torch.bfloat16)
    model = model.cuda()
    model.train()
    measure.enable_checkpointing(model, kind, a.checkpointing, torch)
    opt = measure.make_optimizer("adamw", model.parameters(), torch)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
    labels = ids.clone()
    amp = a.precision.startswith("amp")
    steps = []
    for step in range(a.steps):
        counts.append({})
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=labels).loss
        torch.cuda.synchronize()
        fwd = torch.cuda.max_memory_allocated()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        steps.append({"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
                      "forward_peak_allocated": fwd, "routed": [counts[-1].get(i) for i in range(len(blocks))]})
    rec["steps"] = steps
    rec["peak_allocated_bytes"] = max(s["max_allocated"] for s in steps)
    rec["peak_reserved_bytes"] = max(s["max_reserved"] for s in steps)
    torch.cuda.memory._dump_snapshot(os.path.join(a.out, "snapshot.pickle"))
    measure.write_trace(os.path.join(a.out, "events.json"), torch)
    with open(os.path.join(a.out, "run.json"), "w") as f:
        json.dump(rec, f)
    print(json.dumps({k: v for k, v in rec.items() if k != "steps"}), flush=True)


if __name__ == "__main__":
    main()
