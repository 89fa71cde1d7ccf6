#!/usr/bin/env python3
"""Which way the driver carves the context chunk's room that a library's
first kernels open (docs/allocator.md §8, thirty-fourth session): the tiny
MoE's histories carve it upwards from 64 MiB, as va_libs.py's matmul case
does; SmolLM3's, Llama 4's, Phi-2's and OLMo's put cuBLAS's workspace at
320 MiB and the next segments below it. Here a process maps --pre MiB of
segments first (a model's load), runs --kernels distinct PyTorch kernels
(each first launch loads its module), then its first cuBLAS product, then
the fixed sequence of new segments va_libs.py uses. --setup runs first, before
any segment, what a training script does before it loads a model (the
thirty-seventh session: constructing a transformers config sets Triton up
and maps device address space; docs/allocator.md §8). Prints one JSON line:
label, the options, and [MiB, address] per segment of the sequence; with
--trace FILE the allocator's history (every segment, the workspace too).

    python3 bench/torch/addr/va_room.py --label k20 --kernels 20
"""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--pre", type=int, default=0, help="MiB of segments mapped first, in 44 MiB pieces")
ap.add_argument("--kernels", type=int, default=0, help="distinct kernels run before the first product")
ap.add_argument("--after", action="store_true", help="run the kernels after the product instead")
ap.add_argument("--kernels-first", dest="kernels_first", action="store_true",
                help="run the kernels before the --pre segments are mapped")
ap.add_argument("--init", action="store_true", help="fill each --pre segment with normal_ as it is made")
ap.add_argument("--copy", action="store_true", help="make each --pre segment by copying a host tensor")
ap.add_argument("--anchor", action="store_true",
                help="map a 16 MiB segment first (it lands in the context's 24 MiB piece, as a pipeline stage's "
                     "first does): the JSON line's anchor, the address the others are read against")
ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
ap.add_argument("--setup", default="none", choices=["none", "config", "triton", "torchvision", "model"],
                help="before any segment: construct a transformers LlamaConfig; set Triton's driver up; build "
                     "torchvision's resnet18 on the host; build a small transformers Llama on the host")
ap.add_argument("--no-product", dest="product", action="store_false", help="no cuBLAS product before the sequence")
ap.add_argument("--trace")
ap.add_argument("--sizes", default="20,16,16,20,16,16,16,64,64,64,32,20,20,20,20,20,128,32,32,32,32,600,64")
a = ap.parse_args()
import torch

torch.cuda.set_device(0)
if a.trace:
    torch.cuda.memory._record_memory_history(max_entries=100000)
if a.setup in ("config", "model"):
    import transformers
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=2,
                                   num_key_value_heads=2, vocab_size=100)
    if a.setup == "model":
        transformers.LlamaForCausalLM(cfg)
elif a.setup == "triton":
    import triton
    triton.runtime.driver.active.utils
elif a.setup == "torchvision":
    import torchvision
    torchvision.models.resnet18()
keep, out = [], []
anchor = None
if a.anchor:
    keep.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
    anchor = keep[-1].data_ptr()


def pre():
    """--pre MiB of 44 MiB segments: empty, initialised on the GPU as each
    is made (--init: a random fill, as a stage materialised on the GPU is),
    or copied from the host (--copy: a model built on the host, moved)."""
    for _ in range(a.pre // 44):
        if a.copy:
            keep.append(torch.empty(11 << 20, dtype=torch.float32).to("cuda"))
            continue
        t = torch.empty(11 << 20, dtype=torch.float32, device="cuda")
        if a.init:
            torch.nn.init.normal_(t)
        keep.append(t)


def kernels(n):
    """n distinct kernels on small tensors (each a new module to load)."""
    import os, sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kernels import distinct
    keep.extend(distinct(torch, n))


if a.kernels and a.kernels_first:
    kernels(a.kernels)
pre()
if a.kernels and not a.after and not a.kernels_first:
    kernels(a.kernels)
dt = getattr(torch, a.dtype)
if a.product:
    m = torch.ones(64, 64, device="cuda", dtype=dt)
    keep.append(m @ m)  # cuBLAS's first product: its handle and workspace
    torch.cuda.synchronize()
if a.kernels and a.after:
    kernels(a.kernels)
for mib in (int(s) for s in a.sizes.split(",")):
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    out.append([mib, t.data_ptr()])
print(json.dumps({"label": a.label, "setup": a.setup, "product": a.product, "pre": a.pre, "init": a.init, "copy": a.copy, "kernels_first": a.kernels_first, "anchor": anchor, "kernels": a.kernels, "after": a.after, "dtype": a.dtype, "segments": out}), flush=True)
if a.trace:
    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import measure  # bench/torch/measure.py
    measure.write_trace(a.trace, torch)
