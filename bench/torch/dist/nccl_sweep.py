#!/usr/bin/env python3
"""One rank of the NCCL memory sweep: device memory in use (driver,
cudaMemGetInfo) after each step of bringing NCCL up, outside the caching
allocator. Run with torchrun; NCCL_* settings come from the environment (see
nccl_sweep.sh). Prints one JSON line per rank.

Stages: context, first tensor, default process group (eager init through
device_id), first all_reduce (1 MiB and 64 MiB), all_gather_into_tensor,
reduce_scatter_tensor, broadcast, send/recv (even ranks to the next odd one),
with --subgroups K the world split into groups of K ranks, each with its first
all_reduce, then --groups further process groups (new_group over all ranks)
each with its first all_reduce."""
import argparse, json, os, time

ap = argparse.ArgumentParser()
ap.add_argument("--groups", type=int, default=2)
ap.add_argument("--subgroups", type=int, default=0,
                help="with 4 ranks or more: split the world into groups of this many ranks (new_subgroups), "
                     "as a 2-D mesh's inner dimension does, and run a first all_reduce in each")
ap.add_argument("--label", default="")
ap.add_argument("--out", default="", help="write this rank's JSON line to OUT/rankR.json instead of stdout")
a = ap.parse_args()
import torch
import torch.distributed as dist

r, w = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(r)
st = []


def mark(tag):
    torch.cuda.synchronize()
    f, t = torch.cuda.mem_get_info()
    st.append([tag, t - f, torch.cuda.memory_reserved()])


mark("context")
torch.ones(1, device="cuda")
mark("first_tensor")
dist.init_process_group("nccl", device_id=torch.device("cuda", r))
mark("pg_init")
x = torch.ones(1 << 18, device="cuda")
dist.all_reduce(x)
mark("all_reduce_1MiB")
big = torch.ones(16 << 20, device="cuda")
dist.all_reduce(big)
mark("all_reduce_64MiB")
y = torch.empty(w << 18, device="cuda")
dist.all_gather_into_tensor(y, x)
mark("all_gather")
dist.reduce_scatter_tensor(x[: (1 << 18) // w], x)
mark("reduce_scatter")
dist.broadcast(x, 0)
mark("broadcast")
if w % 2 == 0:
    # Even ranks send to the next odd one (with two ranks: 0 sends, 1 receives).
    if r % 2 == 0:
        dist.send(x, r + 1)
    else:
        dist.recv(x, r - 1)
    mark("send_recv")
if a.subgroups and w > a.subgroups:
    sub, _ = dist.new_subgroups(group_size=a.subgroups)
    mark("subgroup_created")
    dist.all_reduce(x, group=sub)
    mark("subgroup_all_reduce")
groups = []
for i in range(a.groups):
    g = dist.new_group(list(range(w)))
    mark("group%d_created" % (i + 2))
    dist.all_reduce(x, group=g)
    groups.append(g)
    mark("group%d_all_reduce" % (i + 2))
    dist.all_gather_into_tensor(y, x, group=g)
    dist.reduce_scatter_tensor(x[: (1 << 18) // w], x, group=g)
    mark("group%d_ag_rs" % (i + 2))
env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
res = json.dumps({"label": a.label, "rank": r, "world": w, "env": env, "date": time.strftime("%Y-%m-%d"),
                  "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "gpu": torch.cuda.get_device_name(), "stages": st})
if a.out:
    # Ranks printing at once can share a line of torchrun's output: one file each.
    with open(os.path.join(a.out, "rank%d.json" % r), "w") as f:
        f.write(res + "\n")
else:
    print("RESULT " + res, flush=True)
dist.destroy_process_group()
