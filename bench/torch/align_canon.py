#!/usr/bin/env python3
"""align_canon.py REAL.json.gz SIM.json.gz [minMiB]: like align.py, but a run
of consecutive frees is compared as a set (frees with no allocation between
them leave the allocator in the same state whatever their order), so only
differences that can change the allocator's state are printed."""
import difflib, gzip, json, sys


def load(p, mn):
    ev = json.load(gzip.open(p))
    out, sizes, run = [], {}, []
    for e in ev:
        a, addr, size, lab = e[0], e[1], e[2], e[3]
        if a == "alloc":
            s = (size + 511) // 512 * 512
            sizes[addr] = s
            if s >= mn:
                out.extend(sorted(run))
                run = []
                out.append(("A", s, str(lab)))
        elif a == "free_completed":
            s = sizes.pop(addr, (size + 511) // 512 * 512)
            if s >= mn:
                run.append(("F", s, str(lab)))
    out.extend(sorted(run))
    return out


mn = float(sys.argv[3]) * (1 << 20) if len(sys.argv) > 3 else 1 << 20
r, s = load(sys.argv[1], mn), load(sys.argv[2], mn)
sm = difflib.SequenceMatcher(None, [x[:2] for x in r], [x[:2] for x in s], autojunk=False)
for op, i1, i2, j1, j2 in sm.get_opcodes():
    if op == "equal":
        print(f"= {i2-i1} events (real {i1}.., sim {j1}..)")
        continue
    print(f"{op} real[{i1}:{i2}] sim[{j1}:{j2}]")
    for k in range(i1, min(i2, i1 + 12)):
        print("   R", r[k][0], round(r[k][1] / 2**20, 2), r[k][2][:60])
    for k in range(j1, min(j2, j1 + 12)):
        print("   S", s[k][0], round(s[k][1] / 2**20, 2), s[k][2][:60])
