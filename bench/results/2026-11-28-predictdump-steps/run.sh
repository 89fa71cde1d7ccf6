#!/usr/bin/env bash
# What simulating steps until the cache repeats changes in memplan's own
# predictions (docs/allocator.md §8): internal/predictdump (every spec,
# imported config and results file's configuration, read from the current
# directory by both builds: run it from the tree's root) at f5ebe25, before the
# change, and at the tree given, compared by source and variant.
#   git worktree add --detach /tmp/before f5ebe25
#   bash bench/results/2026-11-28-predictdump-steps/run.sh /tmp/before . > out.txt
set -eu
before=${1:?usage: run.sh BEFORE_TREE AFTER_TREE}
after=${2:?usage: run.sh BEFORE_TREE AFTER_TREE}
(cd "$before" && go build -o /tmp/pd-before ./internal/predictdump) && /tmp/pd-before >/tmp/pd-before.txt
(cd "$after" && go build -o /tmp/pd-after ./internal/predictdump) && /tmp/pd-after >/tmp/pd-after.txt
(cd "$after" && git log --oneline -1)
python3 - <<'P'
import json
def load(p):
    d = {}
    for l in open(p):
        x = json.loads(l)
        d[(x["source"], x["variant"])] = x.get("result") or {}
    return d
a, b = load("/tmp/pd-before.txt"), load("/tmp/pd-after.txt")
common = [k for k in a if k in b and a[k].get("peak_reserved_bytes")]
steps = lambda r: max((p["iteration"] for p in r.get("phases", [])), default=-1) + 1
ch = sorted(b[k]["peak_reserved_bytes"] / a[k]["peak_reserved_bytes"] - 1 for k in common
            if a[k]["peak_reserved_bytes"] != b[k].get("peak_reserved_bytes"))
print(f"{len(common)} predictions in both; peak reserved changed in {len(ch)}, up in {sum(c > 0 for c in ch)}, "
      f"from {100*ch[0]:+.2f}% to {100*ch[-1]:+.2f}%; more than two steps simulated where two were: "
      f"{sum(steps(b[k]) > 2 and steps(a[k]) <= 2 for k in common)}")
P
