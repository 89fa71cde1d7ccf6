#!/usr/bin/env python3
"""Does setting up the process group before the device reserve more of the
address space (docs/allocator.md §8, thirty-sixth session)? The pipeline
harness (common.setup) calls init_process_group("nccl") before
torch.cuda.set_device; its stages' histories put their second segment about
930 MiB below the first where va_nccl.py's processes (device first) put it
552 below. Each rank: --order init-first or device-first, then --steps of
set-up as pp.py takes them (with --hf, a transformers model built on the
meta device, as build_hf_stage does first), then a 20 MiB segment and
twelve of 32 MiB; prints one JSON line per rank: label, rank, order, and
[MiB, address] per segment. Under torchrun, one rank per GPU:

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_order.py --order init-first --label a
"""
import argparse, json, os

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--order", choices=["init-first", "device-first", "no-dist"], required=True)
ap.add_argument("--hf", help="a transformers config to build on the meta device first, as pp.py's stages are")
ap.add_argument("--hf-device", default="meta", help="where --hf builds it: meta, or cpu (as measure.py does)")
ap.add_argument("--call", default="", help="a Python expression run first (after the imports), e.g. a backend query")
ap.add_argument("--import", dest="imports", default="",
                help="modules to import first, comma-separated (transformers, torch.nn.attention.flex_attention, ...)")
a = ap.parse_args()
import torch
import torch.distributed as dist

local = int(os.environ.get("LOCAL_RANK", "0"))
if a.order == "init-first":
    dist.init_process_group("nccl")
    torch.cuda.set_device(local)
elif a.order == "device-first":
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
else:
    torch.cuda.set_device(local)
import importlib
for mod in filter(None, a.imports.split(",")):
    importlib.import_module(mod)
if a.call:
    eval(a.call)
if a.hf:
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import measure  # bench/torch/measure.py
    with torch.device(a.hf_device):
        measure.build_hf(a.hf, "sdpa")
keep, out = [], []
for mib in [20] + [32] * 12:
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    out.append([mib, t.data_ptr()])
torch.cuda.synchronize()
print(json.dumps({"label": a.label, "rank": int(os.environ.get("RANK", "0")), "order": a.order, "hf": a.hf, "hf_device": a.hf_device, "imports": a.imports, "call": a.call, "segments": out}), flush=True)
if dist.is_initialized():
    dist.destroy_process_group()
