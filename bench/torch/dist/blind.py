#!/usr/bin/env python3
"""blind.py PREDICTIONS.txt RESULTS.jsonl...: the errors of predictions as
they were committed before measuring (the output of predict.py, kept in
bench/results/*-predictions.txt) against the records of tp-run.sh or run.sh.
Per line: (predicted − measured) / measured for peak allocated, peak
reserved and device total, each against the largest rank (and, for tp.py,
pp.py and cp.py records, the largest step); pipelines take the largest of
their kinds of stage per metric, as compare.py does. Grid lines written
with pp.py's old --virtual flag match records made with --stages-per-rank;
records labelled " [rope fp32]" (MEMPLAN_ROPE_FP32=1) match their line's
prediction.

    python3 bench/torch/dist/blind.py bench/results/2026-11-23-pp-tp-predictions.txt \\
        bench/results/2026-11-26-h200x4-pp-tp.jsonl bench/results/2026-11-26-h200x4-pp-tp-heldout.jsonl
"""
import json
import re
import sys


def predictions(path):
    out, cur = {}, None
    for line in open(path):
        if line.startswith("#"):
            continue  # a comment (where and how the predictions were made)
        if line.strip() and not line.startswith(" "):
            # A grid line (predict.py indents its figures under it).
            # ep-run.sh's grids start with W=N, run.sh's with T=S, fake
            # ranks' lines with F=R: records are labelled with the line
            # without them.
            cur = re.sub(r"^([WTF]=\d+ )+", "", line.strip()).replace("--virtual", "--stages-per-rank")
            out[cur] = {"fig": [0, 0, 0], "kinds": []}
        elif cur is None:
            continue
        elif "allocated" in line and "reserved" in line:  # a kind of stage
            out[cur]["kinds"].append([int(x) for x in re.findall(r"(\d+) B", line)])
        else:
            for i, key in enumerate(("peak allocated", "peak reserved", "device total")):
                if key in line:
                    out[cur]["fig"][i] = int(line.split()[-2])
    return out


def measured(d):
    if "busiest_peak_allocated_bytes" in d:  # train.py, through run.sh's merge.py
        return [d["busiest_peak_allocated_bytes"], d["busiest_peak_reserved_bytes"], d["busiest_device_total_used_bytes"]]
    if "ranks" in d and d["ranks"] and "steps" in d["ranks"][0]:
        m = [0, 0, 0]
        for r in d["ranks"]:
            for s in r["steps"] + [r]:
                m = [max(m[0], s["peak_allocated"]), max(m[1], s["peak_reserved"]), max(m[2], s["device_used"])]
        return m
    raise SystemExit("%s: not a tp-run.sh or run.sh record" % d.get("label"))


def main():
    preds = predictions(sys.argv[1])
    for path in sys.argv[2:]:
        for line in open(path):
            d = json.loads(line)
            if d.get("ok") is False or d.get("exit", 0) != 0:
                continue
            # A run under MEMPLAN_ROPE_FP32=1 is labelled " [rope fp32]"
            # (common.report); memplan's prediction for it is its line's.
            # One rank on a fake process group (tp-run.sh's F=R lines) is
            # labelled " [fake N rank R]"; its prediction is its line's.
            label = re.sub(r" \[fake \d+ rank \d+\]$", "", d["label"])
            p = preds.get(label) or preds.get(label.removesuffix(" [rope fp32]"))
            if p is None:
                print("no committed prediction for", d["label"])
                continue
            pred = p["fig"]
            for k in p["kinds"]:
                pred = [max(pred[i], k[i]) for i in range(3)]
            m = measured(d)
            print("%-100s %s" % (d["label"][:100], "  ".join("%+.1f%%" % (100 * (pred[i] / m[i] - 1)) for i in range(3))))


if __name__ == "__main__":
    main()
