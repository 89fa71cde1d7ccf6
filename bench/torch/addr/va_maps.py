#!/usr/bin/env python3
"""The driver's address-space reservations themselves (docs/allocator.md §8,
thirty-seventh session). With unified addressing every device allocation
and every range the CUDA driver reserves lies in the process's own virtual
address space, so /proc/self/maps lists them: this probe reads it after
each step of a short run and prints what appeared and what went, so that
the chunks memplan's address model infers from segment addresses (the
context's reservation, cuBLAS's code, NCCL's rooms) can be read directly.

Steps, each optional but the first: an anchor (a 16 MiB segment, which lands
in the context's 24 MiB piece); --pre MiB of 44 MiB segments (with --init a
random fill of each as it is made); --kernels distinct kernels; with --p2p
(under torchrun, two ranks) a send and receive between them, as a
pipeline's warm-up does; cuBLAS's first product; then --seq segments of
--mib MiB. Prints one JSON line per rank: the label, the anchor's address,
the segments' addresses, and per step the ranges (start, end, permissions,
path) that appeared and disappeared, those within --window GiB of the
anchor.

    python3 bench/torch/addr/va_maps.py --label plain
    torchrun --standalone --nproc-per-node 2 bench/torch/addr/va_maps.py --label p2p --pre 1200 --p2p
"""
import argparse, json, os

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--pre", type=int, default=0, help="MiB of 44 MiB segments mapped after the anchor")
ap.add_argument("--init", action="store_true", help="fill each --pre segment with normal_ as it is made")
ap.add_argument("--kernels", type=int, default=0, help="distinct kernels after --pre")
ap.add_argument("--p2p", action="store_true", help="a send and receive between ranks 0 and 1 (torchrun)")
ap.add_argument("--no-product", dest="product", action="store_false")
ap.add_argument("--seq", type=int, default=12, help="segments mapped last")
ap.add_argument("--mib", type=int, default=64, help="their size")
ap.add_argument("--window", type=int, default=64, help="GiB either side of the anchor to report")
a = ap.parse_args()
import torch

rank = int(os.environ.get("RANK", "0"))
if a.p2p:
    import torch.distributed as dist
    dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def maps():
    out = set()
    for line in open("/proc/self/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        out.add((lo, hi, f[1], f[5] if len(f) > 5 else ""))
    return out


keep, segs, steps = [], [], []
prev = maps()


def step(name):
    global prev
    torch.cuda.synchronize()
    now = maps()
    steps.append({"step": name, "new": sorted(now - prev), "gone": sorted(prev - now)})
    prev = now


keep.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
anchor = keep[-1].data_ptr()
step("anchor")
for _ in range(a.pre // 44):
    t = torch.empty(11 << 20, dtype=torch.float32, device="cuda")
    if a.init:
        torch.nn.init.normal_(t)
    keep.append(t)
    segs.append(["pre", 44, t.data_ptr()])
if a.pre:
    step("pre")
if a.kernels:
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kernels import distinct  # bench/torch/addr/kernels.py, as va_room.py's
    keep.extend(distinct(torch, a.kernels))
    step("kernels")
if a.p2p:
    t = torch.zeros(1, device="cuda")
    if rank == 0:
        dist.send(t, 1)
    elif rank == 1:
        dist.recv(t, 0)
    step("p2p")
if a.product:
    m = torch.ones(64, 64, device="cuda")
    keep.append(m @ m)
    step("product")
for _ in range(a.seq):
    t = torch.empty(a.mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    segs.append(["seq", a.mib, t.data_ptr()])
step("seq")
w = a.window << 30
for s in steps:
    for k in ("new", "gone"):
        s[k] = [[lo, hi, p, path] for lo, hi, p, path in s[k] if lo < anchor + w and hi > anchor - w]
print(json.dumps({"label": a.label, "rank": rank, "anchor": anchor, "segments": segs, "steps": steps}), flush=True)
if a.p2p:
    dist.destroy_process_group()
