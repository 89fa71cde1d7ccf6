#!/usr/bin/env python3
"""peaklive.py EVENTS.json.gz [--size MiB] [--lifetimes] [--segments]: what an
allocator history holds at its peak.

EVENTS is an event list ([action, address, size, label] per event) as
bench/torch/dist/snap2events.py writes a PyTorch snapshot's, measure.py
--trace writes one run's, or estimate's TestTraceDebug writes memplan's
(MEMPLAN_TRACE_OUT). Prints the peak of allocated bytes and, at that event,
the live blocks counted by size in MiB (rounded), the largest totals first.
With --size S the live blocks of S MiB are listed by label; with
--lifetimes also every block of that size ever allocated, by label, with
its longest life in events (how long each kind of tensor lives). With
--segments, the segments the history maps, counted by size and label (two
ranks' lists side by side show where one reserves more).

    python3 bench/torch/peaklive.py bench/results/2026-11-26-h200x4-pp-interleaved-fsdp-trace-2/c1-rank2.json.gz --size 32
"""
import argparse, collections, json
import history


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("events")
    ap.add_argument("--size", type=int, help="list the live blocks of this many MiB by label")
    ap.add_argument("--lifetimes", action="store_true", help="with --size: the longest life of each label's blocks")
    ap.add_argument("--segments", action="store_true", help="count the mapped segments by size and label")
    a = ap.parse_args()
    ev = history.load(a.events)
    if isinstance(ev, dict):  # {"events": [...], "segments": [...]}, as bench/results/*-trace/ keep them
        ev = ev["events"]
    live, cur, best, at, snap = {}, 0, 0, 0, {}
    born, lives = {}, collections.defaultdict(int)
    mib = lambda b: (b + (1 << 19)) >> 20
    for i, e in enumerate(ev):
        act, addr, size = e[0], e[1], e[2]
        label = str(e[3]) if len(e) > 3 else ""
        if act == "alloc":
            live[addr] = (size, label)
            cur += (size + 511) // 512 * 512
            born[addr] = (i, label)
        elif act in ("free", "free_completed") and addr in live:
            size, _ = live.pop(addr)
            cur -= (size + 511) // 512 * 512
            i0, lab = born.pop(addr)
            if a.size is not None and mib(size) == a.size:
                lives[lab] = max(lives[lab], i - i0)
        if cur > best:
            best, at, snap = cur, i, dict(live)
    print("%s: peak %.3f GiB at event %d of %d" % (a.events, best / 2**30, at, len(ev)))
    if a.segments:
        segs = collections.Counter((mib(e[2]), str(e[3]) if len(e) > 3 else "") for e in ev if e[0] == "segment_alloc")
        print("segments mapped (MiB, label: count), %d in all:" % sum(segs.values()))
        for (m, l), n in sorted(segs.items(), key=lambda kv: (-kv[0][0] * kv[1], kv[0][1])):
            print("  %6d MiB × %4d  %s" % (m, n, l))
    by = collections.Counter()
    for size, _ in snap.values():
        by[mib(size)] += 1
    print("live blocks (MiB × count):", ", ".join("%d × %d" % kv for kv in sorted(by.items(), key=lambda kv: -kv[0] * kv[1])[:16]))
    if a.size is not None:
        labels = collections.Counter(l for size, l in snap.values() if mib(size) == a.size)
        for l, n in labels.most_common():
            print("  %4d  %s" % (n, l))
        if a.lifetimes:
            print("longest life in events, %d MiB blocks, by label:" % a.size)
            for l, n in sorted(lives.items(), key=lambda kv: -kv[1])[:20]:
                print("  %7d  %s" % (n, l))


if __name__ == "__main__":
    main()
