#!/usr/bin/env python3
"""Find the difference between a real allocator history and memplan's
simulated one that changes reserved memory.

    python3 bench/torch/bisect.py REAL.json.gz SIM.json.gz OUT.json.gz N

When the two histories reach different peaks although each, replayed
through memplan's allocator (alloc's TestReplayDebug), gives its own, the
gap is in their requests: usually one small difference among many, whose
effect on the cached blocks' placement grows from step to step. This
aligns the large-pool events of the two (over 1 MiB: smaller requests go to
the small pool and cannot move a large block) as align.py --canon does and
writes the simulated history with its first N differing stretches replaced
by the real history's, each free kept with the allocation it releases.
N = 0 is the simulated history, N at least the count printed is the real
one. Replay OUT with alloc's TestReplayDebug and bisect N to the stretch
whose change moves the peak:

    MEMPLAN_REPLAY=$PWD/OUT.json.gz go test -count=1 ./alloc -run TestReplayDebug -v

The stretch is printed with its events (used in the thirty-second session,
bench/results/2026-11-28-h200x4-shape-inference-traces).

A simulated history's address-model events (estimate's TestTraceDebug
writes "library", "communicator_up", "peer_connected" and "empty_cache")
are kept in OUT where they are, also inside a stretch taken from the real
history, so that OUT replays through the same address model as the
estimate; with
BISECT_ADDR=0 they are left out (set such a replay beside the simulated
history's replayed with MEMPLAN_REPLAY_SKIP=library,communicator_up,
peer_connected).
"""
import difflib, gzip, json, os, sys
import history

MIB = 1 << 20
# BISECT_MIN=0 keeps the small pool's events too: their segments take room in
# the address space (the address model), which can move the large pool's.
MIN = int(os.environ.get("BISECT_MIN", MIB))
ADDR = ("library", "communicator_up", "peer_connected", "empty_cache")
KEEP_ADDR = os.environ.get("BISECT_ADDR", "1") != "0"


def load(path):
    """The large-pool events as (kind, size, id, label), each allocation
    with an id of its own (an address may be reused) and each free with
    its allocation's id; a run of frees sorted by size, as align.py's
    --canon compares them."""
    raw = history.load(path)
    if isinstance(raw, dict):
        raw = raw["events"]
    out, live, n = [], {}, 0
    streams = {"s0": "s0"}
    for a, addr, size, lab in raw:
        # Side streams renamed s1, s2, ... in the order they first appear
        # (a snapshot names them by address, memplan by number), so that a
        # hybrid's allocations on one real stream share one name (the
        # replay takes each label's " sN" as its stream).
        # A label with no stream (measure.py's single-GPU traces) is on
        # the default stream, s0, as memplan's labels say.
        head, _, tail = str(lab).rpartition(" ")
        if head and tail[:1] == "s" and tail[1:].isdigit():
            lab = head + " " + streams.setdefault(tail, f"s{len(streams)}")
        else:
            lab = f"{lab} s0"
        if a in ADDR:
            # An address-model event (only a simulated history has them):
            # kept as ("X", kind, n, library number).
            if KEEP_ADDR:
                n += 1
                out.append(("X", a, n, str(size)))
            continue
        size = (int(size) + 511) // 512 * 512
        if size <= MIN:
            continue
        if a == "alloc":
            n += 1
            live[addr] = n
            out.append(("A", size, n, str(lab)))
        elif a == "free_completed" and addr in live:
            out.append(("F", size, live.pop(addr), str(lab)))
    return out


def translate(real, sim):
    """real's events with each allocation named by the simulated one it
    aligns with (the allocations of the two aligned by size; one real
    only gets an id of its own), so that a free names what it releases in
    the simulated history's terms."""
    ra = [e for e in real if e[0] == "A"]
    sa = [e for e in sim if e[0] == "A"]
    sm = difflib.SequenceMatcher(None, [e[1] for e in ra], [e[1] for e in sa], autojunk=False)
    name, fresh = {}, -1
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            for r, t in zip(ra[i1:i2], sa[j1:j2]):
                name[r[2]] = t[2]
        else:
            for r in ra[i1:i2]:
                name[r[2]] = fresh
                fresh -= 1
    return [(e[0], e[1], name[e[2]], e[3]) for e in real if e[2] in name]


def hybrid(real, sim, blocks):
    """sim with its first `blocks` differing stretches taken from real:
    the two compared event by event, a free by the allocation it releases
    (translate), a run of frees as a set."""
    real = canon(translate(real, sim))
    sim = canon(sim)
    sm = difflib.SequenceMatcher(None, [e[:3] for e in real], [e[:3] for e in sim], autojunk=False)
    out, changed, shown = [], 0, None
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            src = sim[j1:j2]
        else:
            changed += 1
            # The simulated history's address events stay where they are.
            # (at the stretch's start: a library's code is mapped before
            # its first kernel's workspace is asked for).
            src = [e for e in sim[j1:j2] if e[0] == "X"] + real[i1:i2] if changed <= blocks else sim[j1:j2]
            if changed == blocks:
                shown = (op, real[max(0, i1 - 8):i2 + 4], sim[max(0, j1 - 8):j2 + 4])
        for e in src:
            if e[0] == "X":
                out.append([e[1], 0, int(e[3]), ""])
                continue
            out.append(["alloc" if e[0] == "A" else "free_completed", e[2], e[1], e[3]])
    # A patched stretch may free what an unpatched one never made, or
    # make what is never freed: the replay skips frees of unknown blocks.
    return out, changed, shown


def canon(ev):
    """ev with each run of frees sorted by what they release (their
    order leaves the allocator in one state)."""
    out, run = [], []
    for e in ev:
        if e[0] == "F":
            run.append(e)
            continue
        out.extend(sorted(run, key=lambda x: (x[2], x[1])))
        run = []
        out.append(e)
    return out + sorted(run, key=lambda x: (x[2], x[1]))


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    real, sim = load(sys.argv[1]), load(sys.argv[2])
    out, total, shown = hybrid(real, sim, int(sys.argv[4]))
    with gzip.open(sys.argv[3], "wt") as f:
        json.dump(out, f)
    print(f"{total} differing stretches; wrote {len(out)} events")
    if shown:
        op, r, s = shown
        print("stretch", sys.argv[4], op)
        print("   (with 8 events before and 4 after)")
        for e in r[:24]:
            print("   R", e[0], round(e[1] / MIB, 2), e[2], e[3][:70])
        for e in s[:24]:
            print("   S", e[0], e[1] if e[0] == "X" else round(e[1] / MIB, 2), e[2], e[3][:70])


if __name__ == "__main__":
    main()
