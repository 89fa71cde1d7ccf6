#!/usr/bin/env python3
"""both-ways.py MEMPLAN: every train.py FSDP2 record of bench/results (built on
the host or the GPU, not on meta) predicted with the cache emptied after
wrapping, as the run did (--empty-cache-after-wrap), and kept, memplan's
default: peak reserved's error each way against the busiest rank, and the
largest difference between the two. From the repository root:

    go build -o bin/memplan ./cmd/memplan
    python3 bench/results/2026-11-29-devvm-wrap-cache-43rd/both-ways.py bin/memplan > both-ways.txt
"""
import glob, json, subprocess, sys

exe = sys.argv[1]
seen, rows = set(), []
for f in sorted(glob.glob("bench/results/*.jsonl") + glob.glob("bench/results/*/dist.jsonl")):
    for line in open(f):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("mode") != "fsdp" or not d.get("ok") or d.get("meta_init") or d.get("keep_cache") or "memplan" not in d:
            continue
        if "--tp" in d["memplan"] or "--pp" in d["memplan"] or "--cp" in d["memplan"] or "MEASURED" in d["memplan"]:
            continue
        key = d["label"].split(" --snapshot")[0]
        if key in seen:
            continue
        seen.add(key)
        cmd = [a for a in d["memplan"].split()[2:] if a != "--empty-cache-after-wrap"]
        if "--step-pause" not in cmd and d.get("step_pause", 0.2) > 0:
            cmd += ["--step-pause", "0.2"]
        meas = max(r["peak_reserved_bytes"] for r in d["ranks"])
        err = []
        for extra in (["--empty-cache-after-wrap"], []):
            out = subprocess.run([exe, "estimate"] + cmd + extra + ["--device", "h200-141gb", "--format", "json"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                break
            err.append(json.loads(out.stdout)["peak_reserved_bytes"] / meas - 1)
        if len(err) == 2:
            rows.append((abs(err[0] - err[1]), key, err[0], err[1]))
rows.sort(reverse=True)
print("%d records; peak reserved error emptied (as run) / kept, largest difference first" % len(rows))
for d, key, e, k in rows:
    print("%+6.1f%% %+6.1f%%  %s" % (100 * e, 100 * k, key))
