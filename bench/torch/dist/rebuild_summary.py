#!/usr/bin/env python3
"""rebuild_summary.py TIMING.jsonl: the table behind docs/multigpu.md's
"What decides the race": per model and loop (loss.item() after each step or
not), the window from the end of the first step's last all-reduce to the end
of the rebuild (least, median, most, ms), and in how many rank-trials the old
bucket was still allocated right after the rebuild and after the second step.

    python3 bench/torch/dist/rebuild_summary.py bench/results/2026-11-26-h100x2-rebuild-holder/timing.jsonl
"""
import json, statistics, sys

rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["spec"].split("/")[-1].removesuffix(".yaml"), r["item"], r["grad_bytes"])
    for t in r["trials"]:
        rows.setdefault(key, []).append(t)
print("| model | loss.item() | fp32 gradients | window ms (least, median, most) | held after the rebuild | held after step 2 |")
print("|---|---|---|---|---|---|")
for (name, item, grad), ts in rows.items():
    w = [t["window_ms"] for t in ts]
    # after the second step the old bucket shows as the gradient bytes more
    # than the least of the trials
    low = min(t["allocated_after_step2"] for t in ts)
    after = sum(t["allocated_after_step2"] - low > grad // 2 for t in ts)
    print(f"| {name} | {'each step' if item else 'never'} | {grad / 2**30:.2f} GiB | "
          f"{min(w):.0f}, {statistics.median(w):.0f}, {max(w):.0f} | "
          f"{sum(t['held_at_rebuild'] for t in ts)} of {len(ts)} | {after} of {len(ts)} |")
