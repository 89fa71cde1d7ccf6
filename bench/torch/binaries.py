#!/usr/bin/env python3
"""Compare every single-GPU results file under two memplan binaries.

    python3 bench/torch/binaries.py OLD NEW     # rows whose errors changed, and a summary of each
    python3 bench/torch/binaries.py BIN         # the rows of BIN with reserved under by >3% or over by >10%

Runs `BIN bench compare --format json FILE` for each bench/results/*.jsonl
and bench/results/*/*.jsonl that holds single-GPU training runs (the h200x2 files, parameter counts and
largest-batch searches left out) and reads each row's relative errors
(peak allocated, peak reserved, device total). Run from the repository root.
"""
import glob
import json
import subprocess
import sys


def files():
    skip = ("h200x2", "params", "maxbatch")
    # The traced runs' records sit in subdirectories (runs.jsonl beside their
    # histories): compared too (thirty-third session; before, they were missed).
    found = glob.glob("bench/results/*.jsonl") + glob.glob("bench/results/*/*.jsonl")
    return [f for f in sorted(found) if not any(s in f for s in skip)]


def rows(binary, f):
    p = subprocess.run([binary, "bench", "compare", "--format", "json", f], capture_output=True, text=True)
    try:
        d = json.loads(p.stdout)
    except json.JSONDecodeError:
        return []
    return [(r["label"], r["relative_error"]) for r in d.get("rows") or [] if r.get("relative_error")]


def summary(tag, errs):
    res = [e[1] for e in errs]
    print(f"{tag}: {len(res)} rows, reserved worst under {min(res)*100:.1f}%, worst over {max(res)*100:.1f}%, "
          f"under by >3%: {sum(x < -0.03 for x in res)}, over by >10%: {sum(x > 0.10 for x in res)}")


def main():
    if len(sys.argv) == 2:
        for f in files():
            for label, e in rows(sys.argv[1], f):
                if e[1] < -0.03 or e[1] > 0.10:
                    print(f"{f.split('/')[-1][:36]:36} {e[0]*100:+5.1f} {e[1]*100:+5.1f} {e[2]*100:+5.1f}  {label}")
        return
    old, new = sys.argv[1], sys.argv[2]
    all_old, all_new = [], []
    for f in files():
        a, b = dict(rows(old, f)), dict(rows(new, f))
        all_old += a.values()
        all_new += b.values()
        for label in a:
            if label in b and a[label] != b[label]:
                o, n = a[label], b[label]
                print(f"{f.split('/')[-1][:34]:34} {label[:88]:88} reserved {o[1]*100:+.1f} -> {n[1]*100:+.1f}"
                      f"  device {o[2]*100:+.1f} -> {n[2]*100:+.1f}")
    summary("old", all_old)
    summary("new", all_new)


if __name__ == "__main__":
    main()
