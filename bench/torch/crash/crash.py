#!/usr/bin/env python3
"""Produce a real CUDA out-of-memory crash and the evidence memplan diagnose reads.

    python3 bench/torch/crash/crash.py CASE OUTDIR

Each CASE is one crash with a known cause (see CASES at the end). The script
records the allocator's history, runs the workload until torch raises
OutOfMemoryError, and writes into OUTDIR/CASE/:

    log.txt        the training log (stdout and stderr, with the traceback)
    stats.jsonl    torch.cuda.memory_stats(), one JSON object per step, and a
                   last one taken when the error was caught
    summary.txt    torch.cuda.memory_summary() at the error
    snapshot.pickle torch.cuda.memory._dump_snapshot() at the error
    case.json      what the case did and what really caused the crash

Run each case in a fresh process (run.sh does): the allocator's settings
(PYTORCH_CUDA_ALLOC_CONF) are read once per process.
"""
import json, os, sys, time, traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_model(name):
    import transformers
    with open(os.path.join(HERE, "hf", name + ".json")) as f:
        cfg = json.load(f)
    mt = cfg.pop("model_type")
    for k in ("architectures", "torch_dtype", "_name_or_path", "transformers_version"):
        cfg.pop(k, None)
    config = transformers.AutoConfig.for_model(mt, **cfg)
    config._attn_implementation = "sdpa"
    return transformers.AutoModelForCausalLM.from_config(config).cuda(), config.vocab_size


def step_fn(model, opt, vocab, batch, seq):
    """One step as transformers' Trainer takes it: AMP bf16, AdamW (foreach)."""
    x = torch.randint(0, vocab, (batch, seq), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=x, labels=x)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out


class Run:
    def __init__(self, case, outdir):
        self.dir = os.path.join(outdir, case)
        os.makedirs(self.dir, exist_ok=True)
        self.stats = open(os.path.join(self.dir, "stats.jsonl"), "w")
        self.step = 0

    def log_step(self, loss=None):
        s = torch.cuda.memory_stats()
        self.stats.write(json.dumps(s) + "\n")
        self.stats.flush()
        a = s.get("allocated_bytes.all.current", 0)
        msg = f"step {self.step}: allocated {a / 2**30:.2f} GiB"
        if loss is not None:
            msg += f" loss {loss:.4f}"
        print(msg, flush=True)
        self.step += 1

    def dump(self):
        self.stats.write(json.dumps(torch.cuda.memory_stats()) + "\n")
        self.stats.close()
        with open(os.path.join(self.dir, "summary.txt"), "w") as f:
            f.write(torch.cuda.memory_summary())
        torch.cuda.memory._dump_snapshot(os.path.join(self.dir, "snapshot.pickle"))


def fraction(f):
    torch.cuda.set_per_process_memory_fraction(f)


# ---- pressure: the job needs more than the device has ----

def pressure(name, batch, seq, frac=None):
    def run(r):
        if frac:
            fraction(frac)
        model, vocab = hf_model(name)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for _ in range(3):
            out = step_fn(model, opt, vocab, batch, seq)
            r.log_step(out.loss.item())
            del out
    return run


# ---- leaks: allocated grows step over step ----

def leak_val_loss(r):
    """A validation loss computed with grad enabled and kept in a list: each
    keeps its whole forward graph (saved activations) alive."""
    fraction(0.12)
    model, vocab = hf_model("gpt2")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    val = []
    for i in range(10000):
        out = step_fn(model, opt, vocab, 4, 512)
        loss = out.loss.item()
        del out
        x = torch.randint(0, vocab, (4, 512), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            val.append(model(input_ids=x, labels=x).loss)  # no torch.no_grad(), no .item()
        r.log_step(loss)


def leak_outputs(name, batch, seq, frac):
    def run(r):
        """Outputs (logits) appended to a list for later metrics."""
        fraction(frac)
        model, vocab = hf_model(name)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        outs = []
        for i in range(10000):
            out = step_fn(model, opt, vocab, batch, seq)
            outs.append(out.logits)  # kept for metrics, never detached or moved to the CPU
            r.log_step(out.loss.item())
            del out
    return run


def leak_cache(r):
    """A feature cache keyed by step that grows without bound."""
    fraction(0.12)
    model, vocab = hf_model("gpt2")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cache = {}
    for i in range(10000):
        x = torch.randint(0, vocab, (4, 512), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, output_hidden_states=True)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        cache[i] = torch.stack(out.hidden_states).detach()  # the cache is never evicted
        r.log_step(out.loss.item())
        del out


# ---- fragmentation: free memory cached in pieces too small for the request ----

def frag_carve(r):
    """Large blocks freed, carved into 60 MiB tensors, every other one freed:
    half of what is reserved is free but in 60 MiB holes; then 1 GiB requests."""
    fraction(0.1)
    n = int(0.1 * torch.cuda.get_device_properties(0).total_memory) >> 30
    big = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(n)]
    print(f"held {len(big)} blocks of 1 GiB; freeing them", flush=True)
    big.clear()
    r.log_step()
    small = [torch.empty(60 << 20, dtype=torch.uint8, device="cuda") for _ in range(17 * n)]
    r.log_step()
    del small[::2]
    r.log_step()
    print(f"kept {len(small)} tensors of 60 MiB; now allocating 1 GiB tensors", flush=True)
    keep = []
    while True:
        keep.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        r.log_step()


def frag_mixed(r):
    """A loop whose tensors have mixed sizes (variable-length batches): each
    step allocates 40 tensors of 2-40 MiB and keeps every 8th in a bounded
    buffer (the last 40), frees the rest, then uses a per-step workspace that
    grows by 64 MiB a step. The kept tensors pin the segments they came from."""
    fraction(0.1)
    import collections, random
    rnd = random.Random(1)
    kept = collections.deque(maxlen=40)
    for step in range(400):
        tmp = [torch.empty(rnd.randint(2, 40) << 20, dtype=torch.uint8, device="cuda") for _ in range(40)]
        kept.extend(tmp[::8])
        del tmp
        x = torch.empty((256 + 64 * step) << 20, dtype=torch.uint8, device="cuda")
        del x
        r.log_step()


# ---- DDP's bucket rebuild race: the old flat bucket outlives the rebuild ----

def ddp_race(r):
    """A toy DDP over two GPUs (16 bias-free 4096 x 4096 linear layers, 1 GiB
    of fp32 gradients), each rank capped at 3.5 GiB, the second step started
    at once: a rank whose rebuild races keeps the 1 GiB construction bucket
    beside the new buckets, and its second backward's gradients do not fit
    (docs/multigpu.md, "DDP's bucket rebuild race"). A rank that does not
    race peaks at about 3 GiB."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    fraction(3.5 * 2**30 / torch.cuda.get_device_properties(rank).total_memory)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(16)]).cuda()
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 4096, device="cuda")
    for _ in range(3):
        ddp(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        r.log_step()


# ---- other process: memory held on the device outside this process ----

def other(name, batch, seq, hold_gib):
    def run(r):
        import subprocess
        ready = os.path.join(r.dir, ".ready")
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(hold_gib), ready])
        t = time.time()
        while not os.path.exists(ready):
            if time.time() - t > 60 or holder.poll() is not None:
                raise SystemExit("holder did not start")
            time.sleep(0.2)
        os.remove(ready)
        print(f"another process (pid {holder.pid}) holds {hold_gib} GiB on the device", flush=True)
        try:
            pressure(name, batch, seq)(r)
        finally:
            holder.kill()
    return run


HOLDER = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
open(sys.argv[2], "w").close()
time.sleep(120)
"""


CASES = {
    # name: (function, what really caused it)
    "pressure-gpt2-b160": (pressure("gpt2", 160, 1024), "pressure: GPT-2 124M, AMP bf16, AdamW, batch 160 x seq 1024 on the whole 80 GB device"),
    "pressure-qwen2.5-0.5b-b48": (pressure("qwen2.5-0.5b", 48, 2048), "pressure: Qwen2.5-0.5B, AMP bf16, AdamW, batch 48 x seq 2048 on the whole device"),
    "pressure-qwen3-0.6b-b16-frac0.25": (pressure("qwen3-0.6b", 16, 2048, 0.25), "pressure: Qwen3-0.6B, AMP bf16, AdamW, batch 16 x seq 2048, process capped at 0.25 of the device"),
    "leak-val-loss": (leak_val_loss, "leak: GPT-2 batch 4 x 512, validation loss computed with grad and kept in a list (graph kept alive), cap 0.12"),
    "leak-outputs-gpt2": (leak_outputs("gpt2", 4, 512, 0.12), "leak: GPT-2 batch 4 x 512, logits appended to a list every step, cap 0.12"),
    "leak-outputs-qwen3": (leak_outputs("qwen3-0.6b", 2, 1024, 0.25), "leak: Qwen3-0.6B batch 2 x 1024, logits appended to a list every step, cap 0.25"),
    "leak-cache": (leak_cache, "leak: GPT-2 batch 4 x 512, all hidden states stacked and cached per step (detached, never evicted), cap 0.12"),
    "frag-carve": (frag_carve, "fragmentation: 60 MiB tensors carved from freed 1 GiB blocks, every other freed, then a 1 GiB request, cap 0.1"),
    "frag-mixed": (frag_mixed, "mixed 2-40 MiB tensors, the last 40 kept, a per-step workspace growing 64 MiB a step, cap 0.1: fragmentation if the failed request fit in the cap minus allocated, else pressure"),
    "ranks": (pressure("gpt2", 40, 1024, 0.2), "pressure, two ranks under torchrun on one GPU, each capped at 0.2: GPT-2 batch 40 x 1024"),
    "ddp-race": (ddp_race, "pressure from DDP's bucket rebuild race: a toy DDP over two GPUs (1 GiB of fp32 gradients), each rank capped at 3.5 GiB, the second step started at once; a racing rank keeps the old 1 GiB bucket and its second backward does not fit"),
    "other-gpt2": (other("gpt2", 16, 1024, 70), "other-process: a second process holds 70 GiB; GPT-2 batch 16 x 1024 (needs about 20 GiB)"),
    "other-qwen2.5": (other("qwen2.5-0.5b", 8, 2048, 66), "other-process: a second process holds 66 GiB; Qwen2.5-0.5B batch 8 x 2048"),
}


# ONE_GPU_PER_RANK are the cases whose torchrun ranks each take their own
# GPU (NCCL); the others' ranks share the first.
ONE_GPU_PER_RANK = {"ddp-race"}


def truth_check():
    """What the allocator held when the request failed: a failed request that
    fits in the limit minus what is allocated means the free memory was there
    but in pieces (fragmentation)."""
    s = torch.cuda.memory_stats()
    snap = torch.cuda.memory._snapshot()
    oom = [e for e in snap["device_traces"][torch.cuda.current_device()] if e["action"] == "oom"]
    request = oom[-1]["size"] if oom else None
    free, total = torch.cuda.mem_get_info()
    out = {"allocated": s["allocated_bytes.all.current"], "reserved": s["reserved_bytes.all.current"],
           "request": request, "device_free": free, "device_total": total,
           "num_alloc_retries": s["num_alloc_retries"], "num_ooms": s["num_ooms"]}
    return out


def main():
    case, outdir = sys.argv[1], sys.argv[2]
    base = case.removesuffix("+expandable")
    fn, cause = CASES[base]
    if "RANK" in os.environ:
        case += "-rank" + os.environ["RANK"]
    r = Run(case, outdir)
    if base in ONE_GPU_PER_RANK:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.cuda.init()
    # MEMPLAN_MAX_ENTRIES: a longer history (1000000 gives a snapshot of
    # about 100 MB, diagnose's speed test on a real dump).
    torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("MEMPLAN_MAX_ENTRIES", "20000")),
                                             stacks="python")
    info = {"case": case, "cause": cause, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "total_bytes": torch.cuda.get_device_properties(0).total_memory}
    t = time.time()
    try:
        fn(r)
        info["outcome"] = "finished without an error"
    except torch.OutOfMemoryError as e:
        traceback.print_exc()
        sys.stderr.flush()
        r.dump()
        info["outcome"] = "OutOfMemoryError"
        info["message"] = str(e)
        info.update(truth_check())
    info["seconds"] = round(time.time() - t, 1)
    info["steps_logged"] = r.step
    with open(os.path.join(r.dir, "case.json"), "w") as f:
        json.dump(info, f, indent=1)
    if info["outcome"] == "OutOfMemoryError":
        if "RANK" in os.environ:
            time.sleep(8)  # let the other ranks reach their own error before torchrun stops them
        sys.exit(1)


if __name__ == "__main__":
    main()
