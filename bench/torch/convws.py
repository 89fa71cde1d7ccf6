#!/usr/bin/env python3
"""Measure cuDNN's convolution workspaces, the transient buffers a training
step's convolutions take from the caching allocator.

    python3 bench/torch/convws.py [--batches 16,64,128,256,512,1024] > convws.jsonl
    python3 bench/torch/convws.py --dims 1 [--batches 1,2,4,...,256] > convws-1d.jsonl
    python3 bench/torch/convws.py --spec specs/cnn-groupnorm.yaml [--batches ...] > convws-spec.jsonl

For every distinct convolution of torchvision's ResNet-18/50/101/152 and of
ViT-B/16's patch embedding, in float32 (TF32, PyTorch's default for cuDNN)
and bfloat16, at each batch size, it runs the forward and the backward
(grad_input and grad_weight, and grad_weight alone as for a network's first
layer) with the allocator's history recorded, and prints one JSON line: the
geometry and the sizes of the blocks each pass allocated and freed before
returning, in order (the workspaces), besides the outputs it kept.

With --dims 1 it does the same for 1-D convolutions (F.conv1d, which cuDNN
runs as a 2-D convolution of unit height): the stems of the audio encoders
(Whisper tiny to large, and specs/whisper-base-encoder.yaml, which is
Whisper base's; wav2vec2/HuBERT's feature extractor over 1 s and 10 s of
16 kHz audio, and its grouped positional convolution). Their lines carry
"dims": 1, "h": 1 and the input length as "w", and "groups". A geometry and
batch that does not fit prints a line with "oom": true instead.

With --dtypes float16 it measures fp16 (amp-fp16's) instead of TF32 and
bf16: cuDNN chooses for fp16 apart from bf16.

With --spec FILE (repeatable) it measures the 2-D convolutions of the
given memplan specs (sequential models with an image input, at the spec's
image size) instead of torchvision's.

The last line describes the machine (torch, cuDNN, GPU, driver, date).
"""
import argparse, datetime, json, subprocess

import torch
import torchvision


def geometries():
    seen = {}
    shapes = {}
    for name, side, builder in (("resnet18", 224, torchvision.models.resnet18), ("resnet50", 224, torchvision.models.resnet50),
                                ("resnet101", 224, torchvision.models.resnet101), ("resnet152", 224, torchvision.models.resnet152),
                                ("vit_b_16", 224, torchvision.models.vit_b_16)):
        with torch.device("meta"):
            m = builder()
        hooks = []
        for mod_name, mod in m.named_modules():
            if isinstance(mod, torch.nn.Conv2d):
                def hook(mod, inp, out, mod_name=mod_name, model=name):
                    x = inp[0]
                    key = (mod.in_channels, mod.out_channels, mod.kernel_size[0], mod.stride[0], mod.padding[0],
                           x.shape[2], x.shape[3], mod.bias is not None)
                    seen.setdefault(key, []).append(model + "." + mod_name)
                hooks.append(mod.register_forward_hook(hook))
        with torch.device("meta"):
            m(torch.empty(1, 3, side, side))
        for h in hooks:
            h.remove()
    return seen


def spec_geometries(paths):
    """The 2-D convolutions of memplan specs, keyed as geometries() keys
    them, found by running each spec's model (measure.py's builder) on the
    meta device at the spec's image size."""
    import os, sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import measure

    seen = {}
    for path in paths:
        spec = measure.load_spec(path, argparse.Namespace())
        with torch.device("meta"):
            m, _ = measure.build(spec, torch)
        side = spec["training"].get("image", 224)
        channels = ((spec["model"].get("input") or {}).get("image") or {}).get("channels", 3)
        hooks = []
        for mod_name, mod in m.named_modules():
            if isinstance(mod, torch.nn.Conv2d):
                def hook(mod, inp, out, mod_name=mod_name):
                    x = inp[0]
                    key = (mod.in_channels, mod.out_channels, mod.kernel_size[0], mod.stride[0], mod.padding[0],
                           x.shape[2], x.shape[3], mod.bias is not None)
                    seen.setdefault(key, []).append(os.path.basename(path) + ":" + mod_name)
                hooks.append(mod.register_forward_hook(hook))
        with torch.device("meta"):
            m(torch.empty(1, channels, side, side))
        for h in hooks:
            h.remove()
    return seen


def geometries_1d():
    """The 1-D convolutions of the audio encoders: (in, out, kernel, stride,
    padding, length, bias, groups) -> where they are used."""
    seen = {}

    def add(key, user):
        seen.setdefault(key, []).append(user)

    # Whisper (openai/whisper model.py AudioEncoder): conv1 n_mels -> d, k3
    # pad 1; conv2 d -> d, k3 stride 2 pad 1; over 3000 frames, with bias.
    for name, mels, d in (("tiny", 80, 384), ("base", 80, 512), ("small", 80, 768), ("medium", 80, 1024),
                          ("large-v2", 80, 1280), ("large-v3", 128, 1280)):
        add((mels, d, 3, 1, 1, 3000, True, 1), "whisper-" + name + ".conv1")
        add((d, d, 3, 2, 1, 3000, True, 1), "whisper-" + name + ".conv2")
    # wav2vec2 / HuBERT feature extractor (conv_bias false in base): 1 -> 512
    # k10 s5, then 512 -> 512 k3 s2 x4 and k2 s2 x2; positional convolution
    # 768 -> 768 k128 pad 64, 16 groups, over the frames it yields.
    for seconds in (1, 10):
        n = 16000 * seconds
        for i, (cin, k, s) in enumerate(((1, 10, 5), (512, 3, 2), (512, 3, 2), (512, 3, 2), (512, 3, 2),
                                         (512, 2, 2), (512, 2, 2))):
            add((cin, 512, k, s, 0, n, False, 1), "wav2vec2-%ds.conv%d" % (seconds, i))
            n = (n - k) // s + 1
        add((768, 768, 128, 1, 64, n, True, 16), "wav2vec2-%ds.pos_conv" % seconds)
    return seen


def machine():
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.split("\n")[0].strip()
    except OSError:
        drv = ""
    return {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(), "driver": drv, "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "tf32": torch.backends.cudnn.allow_tf32, "benchmark": torch.backends.cudnn.benchmark}


_marks = [0]


def mark():
    """Puts a block of a size used once into the allocator's history and
    returns that size: the events after it belong to what follows."""
    _marks[0] += 1
    size = 100_000 + _marks[0]
    torch.empty(size, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    return size


def events_since(size):
    tr = torch.cuda.memory._snapshot()["device_traces"][0]
    i = max(j for j, e in enumerate(tr) if e["action"] == "alloc" and e["size"] == size)
    return tr[i + 2:]  # after the mark's alloc and free


def transients(ev):
    """Blocks allocated and freed within the events, in allocation order."""
    live, out = {}, []
    for e in ev:
        if e["action"] == "alloc":
            live[e["addr"]] = len(out)
            out.append([e["size"], False])
        elif e["action"] == "free_requested" and e["addr"] in live:
            out[live.pop(e["addr"])][1] = True
    return [s for s, freed in out if freed], [s for s, freed in out if not freed]


def run_1d(batches):
    dev = "cuda"
    for key, users in sorted(geometries_1d().items()):
        cin, cout, k, s, p, n, bias, groups = key
        geo = {"dims": 1, "in": cin, "out": cout, "kernel": k, "stride": s, "padding": p, "h": 1, "w": n,
               "groups": groups, "bias": bias}
        for dt in (torch.float32, torch.bfloat16):
            for b in batches:
                try:
                    line = one_1d(geo, dt, b, dev)
                except torch.cuda.OutOfMemoryError:
                    line = {**geo, "dtype": str(dt).split(".")[1], "batch": b, "oom": True}
                torch.cuda.empty_cache()
                print(json.dumps({**line, "used_by": users[:3]}), flush=True)


def one_1d(geo, dt, b, dev):
    cin, cout, k, s, p, n, groups = (geo[x] for x in ("in", "out", "kernel", "stride", "padding", "w", "groups"))
    bias = geo["bias"]
    x = torch.randn(b, cin, n, device=dev, dtype=dt)
    wt = torch.randn(cout, cin // groups, k, device=dev, dtype=dt)
    bs = torch.randn(cout, device=dev, dtype=dt) if bias else None
    return {**geo, "dtype": str(dt).split(".")[1], "batch": b, **passes(x, wt, bs, 1, s, p, groups)}


def passes(x, wt, bs, dims, s, p, groups):
    """The forward's and both backwards' transient blocks of one
    convolution (dims 1 or 2), with the input's and output's sizes."""
    m = mark()
    conv = torch.nn.functional.conv1d if dims == 1 else torch.nn.functional.conv2d
    y = conv(x, wt, bs, s, p, 1, groups)
    torch.cuda.synchronize()
    fwd, kept = transients(events_since(m))
    gy = torch.randn_like(y)
    res = {}
    for label, mask in (("backward", [True, True, bs is not None]), ("backward_weight_only", [False, True, bs is not None])):
        m = mark()
        g = torch.ops.aten.convolution_backward(gy, x, wt, [wt.shape[0]] if bs is not None else None, [s] * dims,
                                                [p] * dims, [1] * dims, False, [0] * dims, groups, mask)
        torch.cuda.synchronize()
        res[label] = transients(events_since(m))[0]
        del g
    return {"input_bytes": x.numel() * x.element_size(), "output_bytes": y.numel() * y.element_size(),
            "forward": fwd, "forward_kept": kept, **res}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default=None, help="default 16,...,1024 (2-D) or 1,2,...,256 (1-D)")
    ap.add_argument("--dims", type=int, choices=(1, 2), default=2)
    ap.add_argument("--spec", action="append", help="measure this spec's 2-D convolutions (repeatable)")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="2-D: the dtypes measured (float16 for amp-fp16)")
    a = ap.parse_args()
    dev = "cuda"
    # a pass makes a handful of events: a short history keeps the snapshots cheap
    torch.cuda.memory._record_memory_history(max_entries=4000 if a.dims == 2 else 400, stacks="python")
    if a.dims == 1:
        run_1d([int(x) for x in (a.batches or "1,2,4,8,16,32,64,128,256").split(",")])
        print(json.dumps(machine()), flush=True)
        return
    a.batches = a.batches or "16,64,128,256,512,1024"
    geos = spec_geometries(a.spec) if a.spec else geometries()
    for key, users in sorted(geos.items()):
        cin, cout, k, s, p, h, w, bias = key
        for dt in [getattr(torch, d) for d in a.dtypes.split(",")]:
            for b in [int(x) for x in a.batches.split(",")]:
                x = torch.randn(b, cin, h, w, device=dev, dtype=dt)
                wt = torch.randn(cout, cin, k, k, device=dev, dtype=dt)
                bs = torch.randn(cout, device=dev, dtype=dt) if bias else None
                line = passes(x, wt, bs, 2, s, p, 1)
                print(json.dumps({"in": cin, "out": cout, "kernel": k, "stride": s, "padding": p, "h": h, "w": w,
                                  "bias": bias, "dtype": str(dt).split(".")[1], "batch": b, **line,
                                  "used_by": users[:3]}), flush=True)
                del x, wt, bs
    print(json.dumps(machine()), flush=True)


if __name__ == "__main__":
    main()
