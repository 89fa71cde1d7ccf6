#!/usr/bin/env python3
"""Measure cuDNN's convolution workspaces, the transient buffers a training
step's convolutions take from the caching allocator.

    python3 bench/torch/convws.py [--batches 16,64,128,256,512,1024] > convws.jsonl

For every distinct convolution of torchvision's ResNet-18/50/101/152 and of
ViT-B/16's patch embedding, in float32 (TF32, PyTorch's default for cuDNN)
and bfloat16, at each batch size, it runs the forward and the backward
(grad_input and grad_weight, and grad_weight alone as for a network's first
layer) with the allocator's history recorded, and prints one JSON line: the
geometry and the sizes of the blocks each pass allocated and freed before
returning, in order (the workspaces), besides the outputs it kept.
"""
import argparse, json

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="16,64,128,256,512,1024")
    a = ap.parse_args()
    dev = "cuda"
    torch.cuda.memory._record_memory_history(max_entries=4000, stacks="python")
    for key, users in sorted(geometries().items()):
        cin, cout, k, s, p, h, w, bias = key
        for dt in (torch.float32, torch.bfloat16):
            for b in [int(x) for x in a.batches.split(",")]:
                x = torch.randn(b, cin, h, w, device=dev, dtype=dt)
                wt = torch.randn(cout, cin, k, k, device=dev, dtype=dt)
                bs = torch.randn(cout, device=dev, dtype=dt) if bias else None
                m = mark()
                y = torch.nn.functional.conv2d(x, wt, bs, s, p)
                torch.cuda.synchronize()
                fwd, kept = transients(events_since(m))
                gy = torch.randn_like(y)
                res = {}
                for label, mask in (("backward", [True, True, bias]), ("backward_weight_only", [False, True, bias])):
                    m = mark()
                    g = torch.ops.aten.convolution_backward(gy, x, wt, [cout] if bias else None, [s, s], [p, p], [1, 1],
                                                            False, [0, 0], 1, mask)
                    torch.cuda.synchronize()
                    res[label] = transients(events_since(m))[0]
                    del g
                print(json.dumps({"in": cin, "out": cout, "kernel": k, "stride": s, "padding": p, "h": h, "w": w,
                                  "bias": bias, "dtype": str(dt).split(".")[1], "batch": b,
                                  "input_bytes": x.numel() * x.element_size(), "output_bytes": y.numel() * y.element_size(),
                                  "forward": fwd, "forward_kept": kept, **res, "used_by": users[:3]}), flush=True)
                del x, wt, bs, y, gy
    print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                      "gpu": torch.cuda.get_device_name(), "tf32": torch.backends.cudnn.allow_tf32,
                      "benchmark": torch.backends.cudnn.benchmark}), flush=True)


if __name__ == "__main__":
    main()
