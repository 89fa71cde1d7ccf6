#!/usr/bin/env python3
"""probe_va.py OUT.jsonl: where the CUDA driver places cudaMalloc allocations.

Every case runs in a fresh process (a fresh CUDA context) and records, for
each cudaMalloc, the size asked for and the device address returned, and
each cudaFree. The raw cases call cudaMalloc/cudaFree of libcudart through
ctypes (CuPy's runtime binding if no libcudart is found): exactly what
PyTorch's caching allocator does when it makes or returns a segment
(sizes: multiples of 2 MiB). The torch cases run with
PYTORCH_NO_CUDA_MEMORY_CACHING=1, so every tensor is its own cudaMalloc,
and launch kernels between allocations, to see whether the driver's own
allocations (lazy module loading, cuBLAS) move the addresses; one torch
case records a caching-allocator trace of a small training loop.

One JSON object per line: {"case", "ops": [[op, size, addr], ...], ...};
the first line describes the machine. docs/allocator.md §8 reads them.
"""
import ctypes
import glob
import json
import os
import random
import subprocess
import sys
import time

MiB = 1 << 20


def cudart():
    """cudaMalloc / cudaFree as (malloc(n) -> addr, free(addr))."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    roots = list(sys.path) + ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    for r in roots:
        if os.path.isdir(r):
            names += glob.glob(os.path.join(r, "nvidia", "*", "lib", "libcudart.so*"))
            names += glob.glob(os.path.join(r, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
            names += glob.glob(os.path.join(r, "libcudart.so*"))
    for n in names:
        try:
            lib = ctypes.CDLL(n)
        except OSError:
            continue
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]

        def malloc(size, lib=lib):
            p = ctypes.c_void_p()
            rc = lib.cudaMalloc(ctypes.byref(p), size)
            if rc != 0:
                raise RuntimeError(f"cudaMalloc({size}) = {rc}")
            return p.value

        def free(addr, lib=lib):
            rc = lib.cudaFree(ctypes.c_void_p(addr))
            if rc != 0:
                raise RuntimeError(f"cudaFree = {rc}")

        lib.cudaFree(ctypes.c_void_p(0))  # create the context
        return malloc, free, n
    import cupy  # fallback

    cupy.cuda.runtime.free(0)
    return cupy.cuda.runtime.malloc, cupy.cuda.runtime.free, "cupy"


class Rec:
    def __init__(self, malloc, free):
        self.m, self.f, self.ops, self.live = malloc, free, [], {}

    def a(self, size_mib, tag=None):
        n = int(size_mib * MiB)
        p = self.m(n)
        self.ops.append(["alloc", n, p])
        return p

    def fr(self, p):
        self.f(p)
        self.ops.append(["free", 0, p])


def raw_case(name):
    malloc, free, lib = cudart()
    r = Rec(malloc, free)
    kind, _, arg = name.partition(":")
    if kind == "seq":  # seq:SIZE:COUNT
        s, c = arg.split(":")
        for _ in range(int(c)):
            r.a(float(s))
    elif kind == "stride":  # four of a size, then four 2 MiB (do they fill its hole?)
        s = float(arg)
        for _ in range(4):
            r.a(s)
        for _ in range(4):
            r.a(2)
    elif kind == "list":  # list:a,b,c (MiB)
        for s in arg.split(","):
            r.a(float(s))
    elif kind == "asc":
        for s in range(2, 98, 2):
            r.a(s)
    elif kind == "desc":
        for s in range(96, 0, -2):
            r.a(s)
    elif kind == "randsizes":
        g = random.Random(int(arg))
        for _ in range(200):
            r.a(2 * g.randint(1, 80))
    elif kind == "lifo":
        p = [r.a(20) for _ in range(16)]
        for x in reversed(p):
            r.fr(x)
        p = [r.a(20) for _ in range(16)]
        for x in p:
            r.fr(x)
        p = [r.a(20) for _ in range(16)]
        for x in p[1::2]:
            r.fr(x)
        for _ in range(8):
            r.a(12)
        for _ in range(8):
            r.a(20)
    elif kind == "holes":
        p = [r.a(48) for _ in range(8)]
        r.fr(p[2])
        r.fr(p[5])
        for _ in range(4):
            r.a(20)
        r.a(48)
        r.a(48)
        r.fr(p[3])
        r.fr(p[4])
        r.a(96)
        r.a(64)
        r.a(40)
    elif kind == "merge":  # neighbours freed: is the joined range reused?
        p = [r.a(32) for _ in range(6)]
        r.fr(p[2])
        r.fr(p[3])
        r.a(64)
        p = [r.a(20) for _ in range(6)]
        r.fr(p[2])
        r.fr(p[3])
        r.a(40)
        r.a(44)
    elif kind == "big":
        for s in (1024, 2004, 4096, 10240):
            r.a(s)
        x = [r.a(20) for _ in range(4)]
        r.fr(x[1])
        b = r.ops[2][2]
        r.fr(b)
        r.a(2004)
        r.a(2004)
        r.a(20)
        r.a(4096)
    elif kind == "randops":  # random allocs and frees of segment-like sizes
        g = random.Random(int(arg))
        sizes = [2] * 6 + [20] * 8 + [12, 14, 24, 26, 32, 48, 50, 64, 98, 148, 200, 500, 2004]
        live, total = [], 0
        for _ in range(1200):
            if live and (g.random() < 0.45 or total > 30 * 1024):
                i = g.randrange(len(live))
                p, s = live.pop(i)
                r.fr(p)
                total -= s
            else:
                s = g.choice(sizes)
                live.append((r.a(s), s))
                total += s
    elif kind == "repeat":  # the same randops twice in one process, freed between
        for rep in range(2):
            g = random.Random(int(arg))
            live = []
            for _ in range(300):
                if live and g.random() < 0.45:
                    r.fr(live.pop(g.randrange(len(live))))
                else:
                    live.append(r.a(g.choice([2, 12, 20, 24, 48, 98])))
            for p in live:
                r.fr(p)
            r.ops.append(["mark", rep, 0])
    elif kind == "small":
        for s in (512 / MiB, 4096 / MiB, 0.5, 1, 1.5, 2, 2.5, 3, 2, 2):
            r.a(s)
    else:
        raise SystemExit(f"unknown case {name}")
    return {"case": name, "lib": lib, "ops": r.ops}


def torch_case(name):
    import torch

    ops = []

    def t(n):
        x = torch.empty(int(n * MiB), dtype=torch.uint8, device="cuda")
        ops.append(["alloc", int(n * MiB), x.data_ptr()])
        return x

    torch.cuda.init()
    torch.empty(1, device="cuda")
    ops.append(["mark", "ctx", 0])
    keep = []
    if name == "torch:seq20":
        keep = [t(20) for _ in range(16)]
    elif name in ("torch:kernels", "torch:kernels-eager"):
        # a first launch of each op loads its module lazily (CUDA_MODULE_LOADING)
        a = torch.randn(256, 256, device="cuda")
        ops.append(["mark", "randn", 0])
        keep.append(t(20))
        work = [
            lambda: a + 1,
            lambda: a @ a,
            lambda: torch.softmax(a, -1),
            lambda: torch.nn.functional.layer_norm(a, (256,)),
            lambda: torch.nn.functional.gelu(a),
            lambda: a.half() @ a.half(),
            lambda: torch.nn.functional.conv2d(a.view(1, 1, 256, 256), torch.ones(4, 1, 3, 3, device="cuda")),
            lambda: a.sum(0),
            lambda: torch.cumsum(a, 0),
            lambda: a.bfloat16() @ a.bfloat16(),
        ]
        for i, w in enumerate(work):
            keep.append(w())
            torch.cuda.synchronize()
            ops.append(["mark", f"op{i}", 0])
            keep.append(t(20))
            keep.append(t(20))
    elif name == "torch:train":
        # a small MLP's training steps under the caching allocator, traced
        torch.cuda.memory._record_memory_history(max_entries=100000)
        m = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
        opt = torch.optim.AdamW(m.parameters())
        x = torch.randn(512, 2048, device="cuda")
        for _ in range(3):
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        for tr in snap["device_traces"]:
            for e in tr:
                if e["action"].startswith("segment"):
                    ops.append([e["action"], e["size"], e["addr"]])
    return {"case": name, "torch": torch.__version__, "ops": ops}


RAW = (
    ["seq:2:48", "seq:20:48", "seq:12:24", "seq:24:16", "seq:48:16", "seq:98:12", "seq:148:8",
     "asc:", "desc:", "randsizes:1", "randsizes:2", "lifo:", "holes:", "merge:", "big:",
     "randops:1", "randops:2", "randops:1", "repeat:7", "small:",
     "list:148,20,2,20,20,20,20,20,20,20,20,20,20,20,20,20,20,20,20,20,20,12,12,12,18,32,20,20,12"]
    + [f"stride:{s}" for s in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 30, 32, 34, 40, 48, 50,
                               62, 64, 66, 74, 96, 98, 130, 148, 160, 256, 258, 514, 1026, 2004)]
)
TORCH = ["torch:seq20", "torch:kernels", "torch:kernels-eager", "torch:train", "torch:train"]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        c = sys.argv[2]
        out = torch_case(c) if c.startswith("torch:") else raw_case(c)
        print(json.dumps(out))
        return
    path = sys.argv[1]
    info = {"case": "machine", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        info["nvidia_smi"] = repr(e)
    try:
        info["torch"] = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                                       capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:  # noqa: BLE001
        info["torch"] = repr(e)
    with open(path, "w") as f:
        f.write(json.dumps(info) + "\n")
        f.flush()
        for c in RAW + TORCH:
            env = dict(os.environ)
            if c.startswith("torch:"):
                if c != "torch:train":
                    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
                if c.endswith("-eager"):
                    env["CUDA_MODULE_LOADING"] = "EAGER"
            t0 = time.time()
            p = subprocess.run([sys.executable, __file__, "--case", c], capture_output=True, text=True,
                               env=env, timeout=60)
            if p.returncode != 0:
                f.write(json.dumps({"case": c, "error": p.stderr[-2000:]}) + "\n")
            else:
                f.write(p.stdout.strip() + "\n")
            f.flush()
            print(c, f"{time.time() - t0:.1f}s", p.returncode, flush=True)


if __name__ == "__main__":
    main()
