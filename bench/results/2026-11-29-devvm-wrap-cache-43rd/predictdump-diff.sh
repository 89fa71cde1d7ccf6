#!/usr/bin/env bash
# Every prediction of internal/predictdump (bundled specs, imported configs and their variants, every committed
# single-GPU record) at the parent tree in BASE and at this tree, and those whose peak reserved moved, from the
# repository root:
#   git worktree add --detach /tmp/base 87230d5
#   bash bench/results/2026-11-29-devvm-wrap-cache-43rd/predictdump-diff.sh /tmp/base > predictdump-diff.txt
set -eu
base=$1
t=$(mktemp -d)
(cd "$base" && go build -o "$t/old" ./internal/predictdump && "$t/old" >"$t/old.txt")
go build -o "$t/new" ./internal/predictdump && "$t/new" >"$t/new.txt"
python3 - "$t/old.txt" "$t/new.txt" <<'PY'
import json, sys
def load(p):
    return {(r.get("source"), r.get("variant")): r for r in map(json.loads, open(p))}
old, new = load(sys.argv[1]), load(sys.argv[2])
moved = []
for k, a in old.items():
    b = new.get(k)
    if b is None:
        continue
    ra, rb = a.get("result", {}), b.get("result", {})
    if ra.get("peak_reserved_bytes") and ra.get("peak_reserved_bytes") != rb.get("peak_reserved_bytes"):
        moved.append((rb["peak_reserved_bytes"] / ra["peak_reserved_bytes"] - 1, k))
print("%d predictions at the base, %d now (%d new); peak reserved moved on %d:" % (len(old), len(new), len(set(new) - set(old)), len(moved)))
for d, k in sorted(moved):
    print("%+6.2f%%  %s  %s" % (100 * d, k[0], k[1]))
PY
rm -r "$t"
