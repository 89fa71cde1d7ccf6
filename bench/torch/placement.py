#!/usr/bin/env python3
"""Find the first allocation memplan places differently from PyTorch.

    python3 bench/torch/placement.py REAL.json.gz SIM.txt [CONTEXT]

REAL is a history with segments: measure.py --trace's (alloc,
free_completed and segment_alloc events: [action, address, size, frame]),
or bench/torch/dist/snap2events.py's from a rank's snapshot (without
--no-segments). SIM is the text `go test ./estimate -run TestTraceDebug -v`
prints when MEMPLAN_TRACE is set and MEMPLAN_TRACE_OUT is not: one line per
event, each large block with the segment and offset memplan's allocator
gave it ("seg N (S MiB) off O MiB").

The allocations over 1 MiB of the two are matched by their order and sizes
(difflib, as bench/torch/align.py matches events); frees are left out, since
they choose no place. Each matched pair must put its block at the same
offset of corresponding segments: a simulated segment corresponds to the
real one its first matched block landed in (segments are numbered in the
order they were created, PyTorch's small pool's too). The first pair that
breaks this is printed with CONTEXT (default 8) pairs before it, which is
where the two programs or allocators part; "no difference" means every
matched allocation lands where PyTorch put it (measure.py runs three steps
and memplan simulates two, so the real history's last step is unmatched). Used in the twentieth session
(docs/pytorch-memory.md §4, "Lifetimes under eager attention and
checkpointing").
"""
import difflib, json, re, sys
import history

MIB = 1 << 20
SIM_LINE = re.compile(r"(alloc|free)\s+(\d+) live.*?  (.*)  \[(\S+) (\d+)\] seg (\d+) \((\d+) MiB\) off (\d+) MiB")


def rounded(n):
    return (n + 511) // 512 * 512


def real_allocs(path):
    """The real allocations over 1 MiB: (size, (segment, offset MiB), frame)."""
    segs, out = [], []
    for e in history.load(path):
        action, addr, size, frame = e[0], e[1], e[2], e[3]
        if action == "segment_alloc":
            segs.append((addr, size))
        elif action == "alloc" and size > MIB:
            where = None
            for k in range(len(segs) - 1, -1, -1):  # a later segment may reuse an address
                base, n = segs[k]
                if base <= addr < base + n:
                    where = (k, (addr - base) // MIB)
                    break
            out.append((rounded(size), where, str(frame)[:40]))
    return out


def sim_allocs(path):
    """The simulated allocations over 1 MiB, as real_allocs gives them."""
    out = []
    for line in open(path):
        m = SIM_LINE.match(line)
        if m and m.group(1) == "alloc":
            out.append((rounded(int(m.group(2))), (int(m.group(6)), int(m.group(8))),
                        "%s [%s %s]" % (m.group(3)[:30], m.group(4), m.group(5))))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    context = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    real, sim = real_allocs(sys.argv[1]), sim_allocs(sys.argv[2])
    if not any(r[1] for r in real):
        sys.exit("placement.py: %s has no segment events" % sys.argv[1])
    sm = difflib.SequenceMatcher(None, [r[0] for r in real], [s[0] for s in sim], autojunk=False)
    seg = {}
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op != "equal":
            continue
        for k in range(i2 - i1):
            r, s = real[i1 + k], sim[j1 + k]
            if r[1] is None:
                continue
            rs, ro = r[1]
            ss, so = s[1]
            seg.setdefault(ss, rs)
            if seg[ss] != rs or ro != so:
                print("first placement difference: real #%d %d MiB at segment %d + %d MiB (%s); "
                      "simulated #%d at segment %d + %d MiB, which corresponds to real segment %d (%s)"
                      % (i1 + k, r[0] // MIB, rs, ro, r[2], j1 + k, ss, so, seg[ss], s[2]))
                for q in range(max(-context, -k - i1), 1):
                    a, b = real[i1 + k + q], sim[j1 + k + q]
                    print("  %4d  real %8.1f MiB %-14s %-40s | sim %-14s %s" % (
                        q, a[0] / MIB, a[1], a[2], b[1], b[2]))
                return
    print("no difference: %d real and %d simulated allocations over 1 MiB, %d matched" % (
        len(real), len(sim), sum(i2 - i1 for op, i1, i2, _, _ in sm.get_opcodes() if op == "equal")))


if __name__ == "__main__":
    main()
