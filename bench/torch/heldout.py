#!/usr/bin/env python3
"""heldout.py PREDICTIONS RESULTS.jsonl: a held-out set's measurements
against the predictions committed before they were taken (no memplan
needed). Errors are (predicted - measured) / measured for peak allocated,
peak reserved and device total; multi-GPU runs are compared on the busiest
rank (the largest value over ranks), pipeline runs also stage by stage.

Prediction files, as bench/results holds them:
  - blocks: a grid line, then "  peak allocated  X GiB  N B" lines
    (bench/torch/dist/predict.py: dist, TP, CP, allocator settings);
  - pipelines: a grid line, then "  stage S (...): peak allocated X GiB N B;
    reserved ...; device total ..." lines (pp);
  - one line each: LABEL ALLOCATED RESERVED DEVICE in bytes (LoRA).

    python3 bench/torch/heldout.py bench/results/2026-11-23-tp-heldout-predictions.txt \\
        bench/results/2026-11-23-h200x2-tp-heldout.jsonl
"""
import json, re, sys

NUM = r"\s+[\d.]+ GiB\s+(\d+) B"


def predictions(path):
    pred, cur = {}, None
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        if not line.startswith(" "):
            parts = line.split()
            if len(parts) > 3 and all(p.isdigit() for p in parts[-3:]):
                pred[" ".join(parts[:-3])] = {"all": tuple(int(p) for p in parts[-3:])}
                cur = None
                continue
            cur = line.strip()
            pred[cur] = {}
            continue
        if cur is None:
            continue
        m = re.search(r"stage (\d+) .*?allocated" + NUM + r"; reserved" + NUM + r"; device total" + NUM, line)
        if m:
            pred[cur][int(m.group(1))] = tuple(int(g) for g in m.groups()[1:])
            continue
        m = re.match(r"\s+(peak allocated|peak reserved|device total)" + NUM, line)
        if m:
            pred[cur].setdefault("fields", {})[m.group(1)] = int(m.group(2))
    for v in pred.values():
        f = v.pop("fields", None)
        if f:
            v["all"] = (f["peak allocated"], f["peak reserved"], f["device total"])
    return pred


def measured(rank):
    """A rank's (allocated, reserved, device) in either schema."""
    get = lambda *ks: next(rank[k] for k in ks if k in rank)
    return (get("peak_allocated", "peak_allocated_bytes"), get("peak_reserved", "peak_reserved_bytes"),
            get("device_used", "device_total_used_bytes"))


def err(p, m):
    return " ".join("%+.1f%%" % (100.0 * (a - b) / b) for a, b in zip(p, m))


pred = predictions(sys.argv[1])
for line in open(sys.argv[2]):
    d = json.loads(line)
    label = d.get("label", "")
    if not d.get("ok"):
        continue
    key = next((k for k in pred if k == label or k.endswith(label) or label.endswith(k)), None)
    if key is None or not pred[key]:
        print("%-100s not predicted" % label[:100])
        continue
    p = pred[key]
    ranks = [measured(r) for r in d["ranks"]] if "ranks" in d else [measured(d)]
    busiest = tuple(max(r[i] for r in ranks) for i in range(3))
    if "all" in p:
        print("%-100s %s" % (label[:100], err(p["all"], busiest)))
        continue
    for s, r in enumerate(ranks):
        print("%-100s stage %d %s" % (label[:100], s, err(p[s], r)))
    print("%-100s busiest %s" % (label[:100], err(tuple(max(v[i] for v in p.values()) for i in range(3)), busiest)))
