#!/usr/bin/env python3
"""Find the largest batch that trains without OOM under a memory fraction.

    python3 bench/torch/maxbatch.py SPEC [measure.py flags] [--fraction 0.9]

The ground truth for memplan's tuner: real training steps (3 per trial,
through measure.py in a fresh process each), doubling from 1 until a trial
runs out of memory, then bisection. Prints one JSON line with every trial,
the largest batch that trained, and the wall time of the whole search.
"""
import json, subprocess, sys, time

here = sys.argv[0].rsplit("/", 1)[0]
args = sys.argv[1:]
frac = "0.9"
if "--fraction" in args:
    i = args.index("--fraction")
    frac = args[i + 1]
    del args[i:i + 2]


def trial(b):
    out = subprocess.run([sys.executable, here + "/measure.py", *args, "--batch", str(b), "--fraction", frac],
                         capture_output=True, text=True, timeout=300)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"batch": b, "ok": False, "error": out.stderr.strip().splitlines()[-1:]}
    r = json.loads(lines[-1])
    return {"batch": b, "ok": r.get("ok", False), "peak_allocated_bytes": r.get("peak_allocated_bytes"),
            "peak_reserved_bytes": r.get("peak_reserved_bytes"), "error": r.get("error", "")}


t0 = time.time()
trials = []
lo, hi, b = 0, None, 1
while hi is None:
    r = trial(b)
    trials.append(r)
    if r["ok"]:
        lo, b = b, b * 2
    else:
        hi = b
while hi - lo > 1:
    mid = (lo + hi) // 2
    r = trial(mid)
    trials.append(r)
    if r["ok"]:
        lo = mid
    else:
        hi = mid
print(json.dumps({"spec": args[0], "flags": args[1:], "fraction": float(frac), "max_batch": lo,
                  "search_seconds": round(time.time() - t0, 1), "trials": trials}), flush=True)
