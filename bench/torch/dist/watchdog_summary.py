#!/usr/bin/env python3
"""watchdog_summary.py FILE: counts, per way of running watchdog.py (gap,
then, sync, TORCH_NCCL_AVOID_RECORD_STREAMS), the rank-trials whose old
flat bucket was still allocated right after DDP's rebuild, and prints each
loop run's steps holding it (no torch needed).

    python3 bench/torch/dist/watchdog_summary.py bench/results/2026-11-26-h100x2-ddp-rebuild/watchdog.jsonl
"""
import collections, json, sys

held = collections.defaultdict(lambda: [0, 0])
for line in open(sys.argv[1]):
    d = json.loads(line)
    key = "gap %s, then %s, sync %s, avoid_record_streams %s" % (
        d["gap"], d.get("then", "sleep"), d.get("sync", False), d["avoid_record_streams"])
    for t in d["trials"]:
        if isinstance(t, list):  # --loop: each step's end and peak
            extra = [s["end"] - t[0]["end"] for s in t]
            print("loop, gap %s, rank %d: steps ending with the bucket held: %s" % (
                d["gap"], d["rank"], [i for i, x in enumerate(extra) if x > d["flat_bucket_bytes"] // 2]))
            continue
        held[key][0] += (t["after_rebuild"] - t["before"]) > d["flat_bucket_bytes"] // 2
        held[key][1] += 1
for key, (h, n) in sorted(held.items()):
    print("%-70s held in %d of %d rank-trials" % (key, h, n))
