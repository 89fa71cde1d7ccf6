#!/usr/bin/env python3
"""steps.py RESULTS.jsonl [TEXT]: every rank's peak allocated and reserved
(GiB) at each step of each record whose label contains TEXT (all without),
for both record formats: train.py's through run.sh (ranks[].steps[] with
max_allocated, max_reserved) and common.report's from tp.py, pp.py and
cp.py (ranks[].steps[] with peak_allocated, peak_reserved). Which rank held
what in which step: a race, a stage, a rank that differs.

    python3 bench/torch/dist/steps.py bench/results/2026-11-28-h200x4-heldout-64/heldout-64-train.jsonl "grad-accum 8"
"""
import json, sys

G = 1 << 30
path, text = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
for line in open(path):
    r = json.loads(line)
    if text not in r.get("label", "") or not r.get("ranks"):
        continue
    print(r["label"])
    for k in r["ranks"]:
        cells = []
        for s in k["steps"]:
            a = s.get("max_allocated", s.get("peak_allocated"))
            v = s.get("max_reserved", s.get("peak_reserved"))
            cells.append("%.2f / %.2f" % (a / G, v / G))
        print("  rank %s: %s" % (k.get("rank", "?"), ", ".join(cells)))
