#!/usr/bin/env python3
"""snap2events.py SNAPSHOT.pickle[.gz] OUT.json.gz [--no-segments] [--final-segments]: one rank's
allocator history (train.py --snapshot, torch.cuda.memory._snapshot()) as the
event list bench/torch/align.py and alloc's TestReplayDebug read: [action,
address, size, "file:line:function sSTREAM"] for every alloc, free_completed,
segment_alloc and segment_free of the longest device trace (no torch needed).
With --no-segments only allocations and frees are kept (align.py's input).
With --final-segments it writes {"events": [...], "segments": [[address,
size, stream], ...]} instead, the segments mapped when the snapshot was
taken beside the history (the form of the seventeenth session's traces in
bench/results/*-trace/; peaklive.py and alloc's TestReplayDebug read both).

    tar xf bench/results/2026-11-26-h100x2-lora-3-traces/snapshots.tar.xz
    python3 bench/torch/dist/snap2events.py c2-snapshot-rank0.pickle /tmp/real.json.gz
"""
import gzip, json, pickle, sys

src, out = sys.argv[1], sys.argv[2]
segments = "--no-segments" not in sys.argv[3:]
opener = gzip.open if src.endswith(".gz") else open
with opener(src, "rb") as f:
    snap = pickle.load(f)
keep = ("alloc", "free_completed") + (("segment_alloc", "segment_free") if segments else ())
events = []
for e in max(snap["device_traces"], key=len):
    if e["action"] not in keep:
        continue
    frame = next((f"{x['filename'].split('/')[-1]}:{x['line']}:{x['name']}" for x in e.get("frames") or []
                  if any(k in x["filename"] for k in ("torch/", "transformers", "peft")) and "memory.py" not in x["filename"]), "")
    events.append([e["action"], e["addr"], e["size"], "%s s%d" % (frame, e.get("stream", 0))])
result = events
if "--final-segments" in sys.argv[3:]:
    result = {"events": events, "segments": [[g["address"], g["total_size"], g["stream"]] for g in snap["segments"]]}
with gzip.open(out, "wt") as f:
    json.dump(result, f)
print(src, len(events), "events")
