#!/usr/bin/env python3
"""summary.py PREDICTIONS RESULTS...: the median and worst absolute error and the count under by more than 3% of
each metric (allocated, reserved, device) over a held-out set's ok records, read as blind.py reads them; a record
run with --attention eager takes the prediction of its line without it (gpt-oss-120b in set 88: the same
prediction, memplan predicts GPT-OSS in eager attention unasked)."""
import json, sys, statistics, importlib.util
spec = importlib.util.spec_from_file_location("blind", "bench/torch/dist/blind.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
preds = b.predictions(sys.argv[1])
errs = [[], [], []]
for path in sys.argv[2:]:
    for line in open(path):
        d = json.loads(line)
        if not d.get("ok"): continue
        lab = d["label"].split(" [fake")[0]
        p = preds.get(lab) or preds.get(lab.replace(" --attention eager", ""))
        if p is None: print("no pred", lab); continue
        m = b.measured(d)
        for i in range(3):
            errs[i].append((p["fig"][i] - m[i]) / m[i] * 100)
for i, n in enumerate(("alloc", "reserved", "device")):
    e = errs[i]
    print(n, len(e), "median %.1f%% worst %.1f%% under %d" % (statistics.median(abs(x) for x in e), max(abs(x) for x in e), sum(x < -3 for x in e)), ["%+.2f" % x for x in e])
