#!/usr/bin/env python3
"""Replays tensor-parallel allocator histories through memplan's allocator
and address model (alloc's TestReplayDebug) three ways: as the model has a
tensor-parallel program (no NCCL events), with NCCL's first communicator
brought up at the history's first DTensor random-tracker event (its first
collective when built on the meta device; the first forward allocation
where there is none), and with the lower room freed there too (peer
connected). Fortieth session, docs/allocator.md §8; run from the
repository root:

    python3 bench/results/2026-11-28-h200x2-trace-74/tp-histories.py FILE.json.gz... > OUT
"""
import gzip, json, subprocess, os, sys
def replay(path, env):
    e = dict(os.environ, MEMPLAN_REPLAY=os.path.abspath(path), **env)
    out = subprocess.run(["go", "test", "-count=1", "./alloc", "-run", "TestReplayDebug", "-v"], capture_output=True, text=True, env=e).stdout
    for l in out.splitlines():
        if l.startswith("model: reserved peak"):
            w = l.split(); return int(w[3]), int(w[11])
for f in sys.argv[1:]:
    evs = json.load(gzip.open(f))
    if isinstance(evs, dict): evs = evs['events']
    R = next((i for i, e in enumerate(evs) if '_random.py' in e[3]), -1)
    F = next((i for i, e in enumerate(evs) if e[0] == 'alloc' and ':forward' in e[3]), -1)
    u = R if R >= 0 else F
    none = replay(f, {})
    a = replay(f, {"MEMPLAN_REPLAY_NCCL": "%d,-1" % u})
    b = replay(f, {"MEMPLAN_REPLAY_NCCL": "%d,%d" % (u, u)})
    print("%-66s R=%5d F=%5d real %6d | none %6d | up@init %6d | up+peer@init %6d" % (f.split('results/')[1][:66], R, F, none[1], none[0], a[0], b[0]))
