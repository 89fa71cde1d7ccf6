#!/usr/bin/env python3
"""segments.py SNAPSHOT.pickle [MIN_MIB]: the allocator's segment history from
one rank's torch.cuda.memory._dump_snapshot (tp-run.sh with SNAPDIR, no torch
needed): every segment_alloc and segment_free, in order, with its size, the
bytes allocated and reserved just before it, and the request that caused it
(its size and the innermost frames of bench/torch and torch that made it).
Sizes in MiB; segments under MIN_MIB (default 0) are counted, not listed.
Read it to find which request grew reserved memory in a later step."""
import pickle, sys

snap = pickle.load(open(sys.argv[1], "rb"))
least = float(sys.argv[2]) if len(sys.argv) > 2 else 0
M = 1 << 20
alloc = res = 0
small = 0
last_req = None


def where(frames):
    keep = [f for f in frames if "/bench/torch/" in f["filename"] or "/torch/" in f["filename"]]
    return " < ".join("%s:%d %s" % (f["filename"].split("/")[-1], f["line"], f["name"]) for f in keep[:4])


# One trace per visible device; the rank's is the one with events.
trace = max(snap["device_traces"], key=len)
for i, e in enumerate(trace):
    a = e["action"]
    if a == "alloc":
        alloc += e["size"]
        last_req = e
    elif a == "free_completed":
        alloc -= e["size"]
    elif a in ("segment_alloc", "segment_map", "segment_free", "segment_unmap"):
        grow = a in ("segment_alloc", "segment_map")
        if e["size"] < least * M:
            small += 1
        else:
            print("%6d %-13s %9.1f MiB  allocated %9.1f reserved %9.1f  stream %s  %s" % (
                i, a, e["size"] / M, alloc / M, res / M, e.get("stream"), where(e.get("frames", []))))
        res += e["size"] if grow else -e["size"]
print("segments under %g MiB: %d events; reserved at the end %.1f MiB (%d segments)" % (
    least, small, sum(s["total_size"] for s in snap["segments"]) / M, len(snap["segments"])))
