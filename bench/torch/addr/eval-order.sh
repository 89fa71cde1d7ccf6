#!/usr/bin/env bash
# eval-order.sh: memplan's predictions with equal-size cached blocks ordered
# by segment age (the default) and by the address model
# (alloc.OrderAddress, docs/allocator.md §8), for every committed results
# file that `memplan bench compare` reads. Prints, per file, the summary of
# each order and the configurations whose error moved by 0.5 points or more.
# Run from the repository root; builds both binaries in a temporary worktree.
set -eu
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/wt" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
go build -o "$tmp/age" ./cmd/memplan
git worktree add --detach "$tmp/wt" HEAD >/dev/null 2>&1
(cd "$tmp/wt" && git apply "$OLDPWD/bench/results/addr/order-address.patch" && go build -o "$tmp/addr" ./cmd/memplan)
for f in bench/results/2026-*.jsonl; do
  b=$(basename "$f" .jsonl)
  "$tmp/age" bench compare "$f" >"$tmp/$b.age" 2>&1 || true
  MEMPLAN_SEGMENT_ORDER=address "$tmp/addr" bench compare "$f" >"$tmp/$b.addr" 2>&1 || true
  grep -q "^all" "$tmp/$b.age" || continue
  echo "== $b"
  for m in age addr; do
    grep -A3 "^all" "$tmp/$b.$m" | grep -E "reserved|device total" | sed "s/^ */  $m  /"
  done
  python3 - "$tmp/$b.age" "$tmp/$b.addr" <<'PY'
import re, sys
def parse(f):
    d = {}
    for l in open(f):
        m = re.match(r'\s*(.*?)\s+(tuning|held-out)\s+(.*)$', l)
        if m:
            e = re.findall(r'([+-]\d+\.\d)%', m.group(3))
            if len(e) >= 3:
                d[m.group(1)] = [float(x) for x in e[:3]]
    return d
a, b = parse(sys.argv[1]), parse(sys.argv[2])
for k in a:
    if k in b and any(abs(a[k][i] - b[k][i]) >= 0.5 for i in range(3)):
        print(f"  moved: {k}: allocated {a[k][0]:+.1f}→{b[k][0]:+.1f}%, reserved {a[k][1]:+.1f}→{b[k][1]:+.1f}%, device total {a[k][2]:+.1f}→{b[k][2]:+.1f}%")
PY
done
