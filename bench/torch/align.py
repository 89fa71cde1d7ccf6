#!/usr/bin/env python3
"""Align a real allocator trace with memplan's simulated one.

    python3 bench/torch/align.py REAL.json.gz SIM.json.gz [minMiB]
    python3 bench/torch/align.py --canon REAL.json.gz SIM.json.gz [minMiB]
    python3 bench/torch/align.py --ident REAL.json.gz SIM.json.gz

REAL is measure.py --trace's history ([action, address, size, frame] per
event), SIM what `go test ./estimate -run TraceDebug` writes with
MEMPLAN_TRACE_OUT. Events under minMiB (default 1) are left out.

Default: the two sequences of (alloc/free, size) diffed, mismatches shown.
--canon: a run of consecutive frees is compared as a set (frees with no
allocation between them leave the allocator in the same state whatever
their order), so only differences that can change its state show.
--ident: the large-pool events (over 1 MiB) compared by block identity, each
free naming the allocation it releases, runs of frees sorted; prints the
first event where the two differ, with its neighbours (or that none does).
"""
import difflib, json, sys
import history


def load(p, mn, canon):
    ev = history.load(p)
    out, sizes, run = [], {}, []
    for e in ev:
        a, addr, size, lab = e[0], e[1], e[2], e[3]
        if a == "alloc":
            s = (size + 511) // 512 * 512
            sizes[addr] = s
            if s >= mn:
                out.extend(sorted(run) if canon else run)
                run = []
                out.append(("A", s, str(lab)))
        elif a == "free_completed":
            s = sizes.pop(addr, (size + 511) // 512 * 512)
            if s >= mn:
                run.append(("F", s, str(lab)))
    out.extend(sorted(run) if canon else run)
    return out


def load_ident(p):
    ev = history.load(p)
    out, born, run, n = [], {}, [], 0
    for e in ev:
        a, addr, size, lab = e[0], e[1], e[2], e[3]
        if size <= 1 << 20:
            continue
        if a == "alloc":
            out.extend(sorted(run, key=lambda x: x[2]))
            run = []
            born[addr] = n
            out.append(("A", (size + 511) // 512 * 512, n, str(lab)))
            n += 1
        elif a == "free_completed":
            run.append(("F", (size + 511) // 512 * 512, born.pop(addr, -1), str(lab)))
    return out + sorted(run, key=lambda x: x[2])


def ident(real, sim):
    r, s = load_ident(real), load_ident(sim)
    for i, (x, y) in enumerate(zip(r, s)):
        if x[:3] != y[:3]:
            print("first difference at", i)
            for k in range(max(0, i - 6), min(i + 10, len(r), len(s))):
                print(k, r[k][:3], r[k][3][:30], "|", s[k][:3], s[k][3][:40])
            return
    print("no difference in", min(len(r), len(s)), "events; real has", len(r), "simulated", len(s))


def diff(real, sim, mn, canon):
    r, s = load(real, mn, canon), load(sim, mn, canon)
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


def main():
    args = sys.argv[1:]
    mode = args.pop(0) if args and args[0] in ("--canon", "--ident") else ""
    if len(args) < 2:
        sys.exit(__doc__)
    if mode == "--ident":
        ident(args[0], args[1])
        return
    mn = float(args[2]) * (1 << 20) if len(args) > 2 else 1 << 20
    diff(args[0], args[1], mn, mode == "--canon")


if __name__ == "__main__":
    main()
