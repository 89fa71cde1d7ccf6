#!/usr/bin/env python3
"""Where NCCL puts its memory in the address space, beside PyTorch's
segments (docs/allocator.md §8: the hole a data-parallel group's first
collectives open). One rank per GPU under torchrun:

    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ALLOC torchrun --standalone --nproc-per-node 2 \\
        bench/torch/dist/va_probe.py --out OUTDIR

Steps, as pp.py under DDP takes them: two segments; init_process_group
(lazy); a device mesh over every rank (a new group, lazy); segments; DDP
over a model of three 96 MiB layers (its shape check and its broadcast,
the group's first collectives); segments; an all_reduce on the default
group; segments; then 40 segments of 32 MiB kept, which fill any room the
driver left. Each rank records its allocator history from the start and
writes OUTDIR/rankR.pickle (torch.cuda.memory._snapshot()) and
OUTDIR/rankR.json: the steps with their times (the history's time_us) and
cudaMemGetInfo's use after each. NCCL's log (stderr) names its
allocations with their addresses."""
import argparse, json, os, time

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
a = ap.parse_args()
import torch
import torch.distributed as dist

r = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(r)
torch.cuda.memory._record_memory_history(max_entries=200000)
steps, keep = [], []


def mark(tag):
    torch.cuda.synchronize()
    f, t = torch.cuda.mem_get_info()
    steps.append({"step": tag, "time_us": time.time_ns() // 1000, "used": t - f,
                  "reserved": torch.cuda.memory_reserved()})


def seg(mib):
    keep.append(torch.empty(mib << 20, dtype=torch.uint8, device="cuda"))
    return keep[-1].data_ptr()


mark("context")
seg(20)
seg(44)
mark("two segments")
dist.init_process_group("nccl")
mark("init_process_group")
from torch.distributed.device_mesh import init_device_mesh

mesh = init_device_mesh("cuda", (dist.get_world_size(),), mesh_dim_names=("dp",))
mark("device mesh")
seg(44)
seg(20)
mark("segments after the mesh")
model = torch.nn.Sequential(*[torch.nn.Linear(5024, 5024, bias=False) for _ in range(3)]).cuda()
mark("model")
from torch.nn.parallel import DistributedDataParallel as DDP

ddp = DDP(model, device_ids=[r], process_group=mesh.get_group())
mark("DDP")
seg(44)
seg(128)
mark("segments after DDP")
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
mark("all_reduce on the default group")
seg(44)
mark("segment after it")
for _ in range(40):
    seg(32)
mark("forty 32 MiB segments")
os.makedirs(a.out, exist_ok=True)
torch.cuda.memory._dump_snapshot(os.path.join(a.out, f"rank{r}.pickle"))
with open(os.path.join(a.out, f"rank{r}.json"), "w") as f:
    json.dump({"rank": r, "steps": steps, "nccl": torch.cuda.nccl.version()}, f)
dist.barrier()
dist.destroy_process_group()
