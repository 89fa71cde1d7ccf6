#!/usr/bin/env python3
"""merge.py DIR LABEL SECONDS RC: one JSON line from the rank<R>.json files
that bench/torch/dist/train.py wrote into DIR (no torch needed)."""
import glob, json, os, sys

d, label, secs, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
ranks = []
for p in sorted(glob.glob(os.path.join(d, "rank*.json"))):
    with open(p) as f:
        ranks.append(json.load(f))
rec = {"label": label, "exit": rc, "seconds": secs, "ok": bool(ranks) and all(r.get("ok") for r in ranks)}
if ranks:
    r0 = ranks[0]
    for k in ("spec", "mode", "reshard", "world", "training", "date", "memplan", "torch", "cuda", "nccl", "gpu",
              "driver", "transformers", "parameters", "env", "ep", "router", "ep_skew", "step_pause", "lora", "meta_init",
              "fsdp_experts", "keep_cache", "fake_world", "replicate"):
        rec[k] = r0.get(k)
    for k in ("peak_allocated_bytes", "peak_reserved_bytes", "device_total_used_bytes"):
        v = [r.get(k) for r in ranks]
        rec["busiest_" + k] = max((x for x in v if x is not None), default=None)
    rec["ranks"] = ranks
else:
    rec["error"] = "no rank wrote a result"
print(json.dumps(rec), flush=True)
