#!/usr/bin/env python3
"""snapshot.py RESULTS.jsonl SNAPSHOTS.tar [N...]: reads the allocator
histories train.py --snapshot saved (steps 1 to the last of configuration N, rank 0 and
1; no torch needed; the archive as train.py wrote it, gzipped pickles, or as
bench/results keeps it since the forty-first session, .tar.xz of plain ones) and prints, per CUDA stream (FSDP2's named), the peak of
live bytes, how many blocks of each size were live at that stream's peak,
the largest allocations and the moment of the overall peak with what each
stream held then. Sizes in MiB."""
import collections, gzip, json, pickle, sys, tarfile

lines = [json.loads(l) for l in open(sys.argv[1])]
tar = tarfile.open(sys.argv[2])
want = {int(x) for x in sys.argv[3:]}
M = 1 << 20
for m in sorted(tar.getmembers(), key=lambda m: (int(m.name.split("-")[0][1:]), m.name)):
    c = int(m.name.split("-")[0][1:])
    if want and c not in want:
        continue
    rank = int(m.name.split("rank")[1].split(".")[0])
    data = tar.extractfile(m).read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    snap = pickle.loads(data)
    names = lines[c - 1]["ranks"][rank]["stream_names"]
    nm = lambda s: names.get(str(s), str(s))[:24]
    live, cur = {}, collections.Counter()
    peak, at, speak, sat = 0, None, collections.Counter(), {}
    for i, e in enumerate(snap["device_traces"][0]):
        st = nm(e.get("stream"))
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], st)
            cur[st] += e["size"]
            if cur[st] > speak[st]:
                speak[st] = cur[st]
                sat[st] = collections.Counter(sz >> 20 for sz, s2 in live.values() if s2 == st)
            if sum(cur.values()) > peak:
                peak, at = sum(cur.values()), (i, e["size"], dict(cur))
        elif e["action"] == "free_completed" and e["addr"] in live:
            sz, s2 = live.pop(e["addr"])
            cur[s2] -= sz
    print("c%d rank %d: %s" % (c, rank, lines[c - 1]["label"]))
    if at is None:
        print("  no allocations recorded")
        continue
    print("  overall live peak (allocations of step 1 only) %d MiB at event %d (a %d MiB block): %s" % (
        peak >> 20, at[0], at[1] >> 20, {k: v >> 20 for k, v in at[2].items()}))
    for st, v in speak.items():
        print("  %-24s peak %6d MiB; live blocks at it (MiB x count): %s" % (
            st, v >> 20, dict(sorted(sat[st].items(), reverse=True)[:6])))
    seg = collections.Counter()
    for s in snap["segments"]:
        seg[nm(s["stream"])] += s["total_size"]
    print("  reserved per stream: %s" % {k: v >> 20 for k, v in seg.items()})
