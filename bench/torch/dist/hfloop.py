"""hfloop.py: what the plain-loop scripts (plainloop.py, rebuildtiming.py)
share: the spec, batch, sequence and precision flags, and on each torchrun
rank the process group and the spec's model (bench/torch/measure.py) on the
rank's GPU with a batch of random token ids."""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import measure  # noqa: E402  (bench/torch/measure.py: model construction)


def add_args(ap):
    ap.add_argument("spec")
    for k in ("batch", "seq"):
        ap.add_argument("--" + k, dest=k, type=int)
    ap.add_argument("--precision")


def setup(a, checkpointing=True):
    """Returns torch, the rank, the spec, the model in training mode on the
    rank's GPU (cast to bf16 for pure bf16; checkpointed as the spec says
    unless checkpointing is False), whether autocast runs, and the rank's
    token ids."""
    import torch
    import torch.distributed as dist
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    a.optimizer = a.attention = a.zero_grad = a.grad_accum = a.image = a.dp = a.zero = a.checkpointing = None
    spec = measure.load_spec(a.spec, a)
    t = spec["training"]
    t["precision"] = a.precision or t["precision"]
    model, kind = measure.build(spec, torch)
    if t["precision"] == "bf16":
        model = model.to(torch.bfloat16)
    model = model.to(torch.device("cuda", rank)).train()
    if checkpointing:
        measure.enable_checkpointing(model, kind, t["checkpointing"], torch)
    g = torch.Generator(device="cuda").manual_seed(rank)
    ids = torch.randint(0, spec["model"]["vocab"], (t["batch"], t["seq"]), device="cuda", generator=g)
    return torch, rank, spec, model, t["precision"].startswith("amp"), ids
