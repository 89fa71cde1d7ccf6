#!/usr/bin/env python3
"""compare.py RESULTS.jsonl [MEMPLAN]: the busiest rank's measured peaks
(allocated, reserved, device total) against memplan's prediction for the
command each result line records, run with --device h200-141gb (ddp-view
lines with --bucket-view).
Prints a markdown table; errors are (predicted - measured) / measured."""
import json, subprocess, sys

res, exe = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "memplan")
print("| configuration | rank | alloc meas | alloc err | reserved meas | res err | device meas | dev err | spread alloc |")
print("|---|---|---|---|---|---|---|---|---|")
G = 1 << 30
for line in open(res):
    d = json.loads(line)
    if not d.get("ok"):
        continue
    cmd = d["memplan"].split()[2:]
    star = ""
    if d.get("mode") == "ddp-view" and "--bucket-view" not in cmd:
        cmd.append("--bucket-view")  # records made before memplan had the flag
    p = json.loads(subprocess.run([exe, "estimate"] + cmd + ["--device", "h200-141gb"], capture_output=True,
                                  text=True, check=True).stdout)
    ranks = d["ranks"]
    b = max(ranks, key=lambda r: r["peak_reserved_bytes"])
    al = [r["peak_allocated_bytes"] for r in ranks]
    err = lambda pr, m: "%+.1f%%" % (100.0 * (pr - m) / m)
    lab = d["label"].replace("specs/", "").replace(".yaml", "").replace("--precision ", "").replace("--mode ", "")
    print("| %s%s | %d | %.2f | %s | %.2f | %s | %.2f | %s | %.2f |" % (
        lab, star, b["rank"], b["peak_allocated_bytes"] / G, err(p["peak_allocated_bytes"], max(al)),
        b["peak_reserved_bytes"] / G, err(p["peak_reserved_bytes"], b["peak_reserved_bytes"]),
        b["device_total_used_bytes"] / G, err(p["device_total_bytes"], b["device_total_used_bytes"]),
        (max(al) - min(al)) / G))
