#!/usr/bin/env python3
"""pdcmp.py BEFORE AFTER [N]: two internal/predictdump outputs side by side: the predictions whose peak allocated or
reserved changed, by the change in reserved (the N lowest, default 40, then the 10 highest)."""
import json,sys
def load(p):
    d={}
    for l in open(p):
        x=json.loads(l); d[(x["source"],x["variant"])]=x.get("result") or {}
    return d
a,b=load(sys.argv[1]),load(sys.argv[2])
n=0
rows=[]
for k in a:
    if k not in b: continue
    ra,rb=a[k],b[k]
    pa,pb=ra.get("peak_allocated_bytes"),rb.get("peak_allocated_bytes")
    qa,qb=ra.get("peak_reserved_bytes"),rb.get("peak_reserved_bytes")
    if (pa,qa)!=(pb,qb):
        rows.append(((qb or 0)/(qa or 1)-1,(pb or 0)/(pa or 1)-1,k))
rows.sort()
print(len(a),"predictions;",len(rows),"changed")
for r in rows[:int(sys.argv[3]) if len(sys.argv)>3 else 40]: print("res %+.3f%% alloc %+.3f%%  %s | %s"%(100*r[0],100*r[1],r[2][0][-60:],r[2][1][:90]))
if len(rows)>40:
    print("...")
    for r in rows[-10:]: print("res %+.3f%% alloc %+.3f%%  %s | %s"%(100*r[0],100*r[1],r[2][0][-60:],r[2][1][:90]))
