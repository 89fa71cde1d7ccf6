# align.py REAL.json.gz SIM.json.gz [minMiB]: align real and simulated allocator event sequences
import gzip, json, sys, difflib
def load(p, real):
    ev = json.load(gzip.open(p))
    out = []
    sizes = {}
    for e in ev:
        a, addr, size, lab = e[0], e[1], e[2], e[3]
        if a == "alloc":
            s = (size + 511)//512*512
            sizes[addr] = s
            out.append(("A", s, lab))
        elif a == "free_completed":
            s = sizes.pop(addr, (size+511)//512*512)
            out.append(("F", s, lab))
    return out
mn = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
r = [x for x in load(sys.argv[1], True) if x[1] >= mn*(1<<20)]
s = [x for x in load(sys.argv[2], False) if x[1] >= mn*(1<<20)]
sm = difflib.SequenceMatcher(None, [x[:2] for x in r], [x[:2] for x in s], autojunk=False)
for op, i1, i2, j1, j2 in sm.get_opcodes():
    if op == "equal":
        print(f"= {i2-i1} events (real {i1}.., sim {j1}..)")
        continue
    print(f"{op} real[{i1}:{i2}] sim[{j1}:{j2}]")
    for k in range(i1, min(i2, i1+12)):
        print("   R", r[k][0], round(r[k][1]/2**20, 2), str(r[k][2])[:60])
    for k in range(j1, min(j2, j1+12)):
        print("   S", s[k][0], round(s[k][1]/2**20, 2), str(s[k][2])[:60])
