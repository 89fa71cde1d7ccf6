#!/usr/bin/env bash
# The forty-fifth session's context_parallel rotary buffer (a07718b, cf8ea4d; docs/parallelism.md §3.3, "The rotary
# buffer") against the tree in BASE (6e572f2: the head change and set 86's predictions, before it): every logged
# multi-GPU line of bench's tests that both trees log, compared by bench/torch/dist/benchlog_diff.py (output
# cprope-diff.txt beside this script; lines only the newer tree logs, its new records, are left out).
#   git worktree add --detach /tmp/base 6e572f2
#   bash bench/results/2026-11-29-devvm-head-45th/cprope.sh /tmp/base
set -eu
base=$1
here=$(dirname "$0")
t=$(mktemp -d)
bash bench/torch/dist/benchlog.sh "$base" >"$t/before.txt"
bash bench/torch/dist/benchlog.sh "$PWD" >"$t/after.txt"
# Only the labels both trees log as often (a label the newer tree logs more
# often, set 85's TinyLlama line run again as rerun-45, is left out of both:
# its lines cannot be paired).
python3 - "$t/before.txt" "$t/after.txt" <<'PY'
import collections, re, sys
key = lambda l: re.match(r"run (.*): [-+]", l).group(1)
a = [l for l in open(sys.argv[1]) if l.startswith("run ")]
b = [l for l in open(sys.argv[2]) if l.startswith("run ")]
na, nb = collections.Counter(map(key, a)), collections.Counter(map(key, b))
same = {k for k in na if na[k] == nb[k]}
for path, lines in ((sys.argv[1], a), (sys.argv[2], b)):
    open(path, "w").writelines(l for l in lines if key(l) in same)
PY
python3 bench/torch/dist/benchlog_diff.py "$t/before.txt" "$t/after.txt" >"$here/cprope-diff.txt"
rm -r "$t"
