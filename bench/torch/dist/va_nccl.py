#!/usr/bin/env python3
"""Where NCCL's set-up leaves room in the address space (docs/allocator.md
§8, thirty-fourth session). va_fill.py stopped filling at the first segment
that landed below all the others, which hid how large each room was; here
every step is followed by the same fixed run of new 32 MiB segments
(nothing is freed, so each is a new segment of the caching allocator, and
the driver alone decides where it goes), so that the room a step opened is
filled and the segments after it show where the driver went next. Steps:

  start       a 20 MiB segment (the context chunk's 24 MiB piece)
  init        init_process_group("nccl"), lazy: no communicator yet
  first       the default group's first collective (--first: all_reduce,
              broadcast of 256 MiB as DDP's first bucket, or all_gather)
  again       a second all_reduce on it (nothing new expected)
  group       a new group over every rank and its first all_reduce
  group2      another new group and its first all_reduce
  broadcast   a 256 MiB broadcast on the last group
  gather      all_gather_into_tensor and reduce_scatter_tensor (FSDP's)
  p2p         a send and receive between ranks 0 and 1 (a pipeline's)

One rank per GPU under torchrun; each rank prints one JSON line: label,
rank, the environment variables that change NCCL or module loading, and
per segment [step, MiB, address], with cudaMemGetInfo's use after each
step ([step, used bytes]); with --snap DIR its allocator history (every
segment, the collectives' small tensors too). With NCCL_DEBUG_SUBSYS=ALLOC and
NCCL_DEBUG_FILE NCCL logs its own allocations with their addresses.

    torchrun --standalone --nproc-per-node 2 bench/torch/dist/va_nccl.py --label default
"""
import argparse, json, os

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--fill", type=int, default=40, help="32 MiB segments after each step")
ap.add_argument("--mib", type=int, default=32, help="size of the fillers")
ap.add_argument("--first", default="all_reduce", choices=["all_reduce", "broadcast", "all_gather"])
ap.add_argument("--snap", help="directory for each rank's allocator history (rankR.pickle)")
a = ap.parse_args()
import torch
import torch.distributed as dist

r = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(r)
if a.snap:  # every segment, the collectives' own tensors included, in order
    torch.cuda.memory._record_memory_history(max_entries=200000)
keep, rows, used = [], [], []


def seg(step, mib):
    t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    keep.append(t)
    rows.append([step, mib, t.data_ptr()])


def done(step):
    torch.cuda.synchronize()
    f, t = torch.cuda.mem_get_info()
    used.append([step, t - f])
    for _ in range(a.fill):
        seg(step, a.mib)


def first(kind, group=None):
    if kind == "all_reduce":
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x, group=group)
    elif kind == "broadcast":
        x = torch.ones(256 << 18, device="cuda")
        dist.broadcast(x, 0, group=group)
    else:
        w = dist.get_world_size(group)
        x = torch.ones(1 << 20, device="cuda")
        y = torch.empty(w << 20, device="cuda")
        dist.all_gather_into_tensor(y, x, group=group)
    keep.append(x)


seg("start", 20)
done("start")
dist.init_process_group("nccl")
done("init")
first(a.first)
done("first")
first("all_reduce")
done("again")
g = dist.new_group(list(range(dist.get_world_size())))
first("all_reduce", g)
done("group")
g2 = dist.new_group(list(range(dist.get_world_size())))
first("all_reduce", g2)
done("group2")
first("broadcast", g2)
done("broadcast")
w = dist.get_world_size()
x = torch.ones(1 << 20, device="cuda")
y = torch.empty(w << 20, device="cuda")
dist.all_gather_into_tensor(y, x, group=g2)
dist.reduce_scatter_tensor(x, y, group=g2)
keep += [x, y]
done("gather")
if dist.get_rank() in (0, 1):
    z = torch.ones(1 << 20, device="cuda")
    if dist.get_rank() == 0:
        dist.send(z, 1)
    else:
        dist.recv(z, 0)
    keep.append(z)
done("p2p")
env = {k: os.environ[k] for k in sorted(os.environ) if k.startswith(("NCCL_", "CUDA_MODULE", "TORCH_NCCL"))}
if a.snap:
    os.makedirs(a.snap, exist_ok=True)
    torch.cuda.memory._dump_snapshot(os.path.join(a.snap, f"{a.label}-rank{r}.pickle"))
print(json.dumps({"label": a.label, "rank": r, "first": a.first, "env": env, "used": used, "segments": rows}), flush=True)
dist.barrier()
dist.destroy_process_group()
