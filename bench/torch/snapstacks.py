#!/usr/bin/env python3
"""snapstacks.py SNAPSHOT.pickle BYTES [N]: the stacks behind allocations
of BYTES bytes in an allocator snapshot recorded with C++ frames
(torch.cuda.memory._record_memory_history(stacks="all"); the dist
harness's MEMPLAN_SNAPSHOT_STACKS=all). Allocations with no Python frame
(autograd's backward) are told apart only by their C++ frames: this prints
each distinct stack (its first N frames, default 14, CPython's and the
allocator's own left out) with how many allocations had it, the most
common first. Needs no torch.

    python3 bench/torch/snapstacks.py c1-rank1.pickle 8388608
"""
import collections
import pickle
import sys

SKIP = ("c10::cuda::CUDACachingAllocator", "c10::CachingAllocator", "CUDACachingAllocator", "_PyEval", "PyObject_",
        "_PyObject", "_PyFunction", "cfunction_", "method_vectorcall", "??", "PyEval_", "slot_tp_", "vectorcall")


def frames(e, n):
    out = []
    for f in e.get("frames") or []:
        name = f.get("name", "")
        if not name or any(s in name for s in SKIP):
            continue
        file = f.get("filename", "")
        out.append(f"{file.split('/')[-1]}:{f.get('line')}:{name}" if file.endswith(".py") else name)
        if len(out) == n:
            break
    return tuple(out)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    snap = pickle.load(open(sys.argv[1], "rb"))
    size, n = int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 14
    seen = collections.Counter()
    for trace in snap.get("device_traces", []):
        for e in trace:
            if e.get("action") == "alloc" and e.get("size") == size:
                seen[frames(e, n)] += 1
    for stack, count in seen.most_common():
        print(f"{count} allocations:")
        for f in stack:
            print("    " + f[:160])
        print()


if __name__ == "__main__":
    main()
