#!/usr/bin/env bash
# Held-out sets 84 and 85 (run after the forty-fourth session's estimator changes) as the memplan before them would
# have predicted them: the tree in BASE (36a6849) predicts each grid (bench/torch/dist/predict.py, DEVICE=h200-141gb)
# and blind.py sets the predictions beside the runs (docs/accuracy.md, forty-fourth session); output before.txt
# beside this script. Then what lies outside the allocator (device total less peak reserved) in every fake-group
# record of the session and the real runs its replicas repeat (the 766, 836 and 1,612 MiB docs/accuracy.md cites).
#   git worktree add --detach /tmp/base 36a6849
#   bash bench/results/2026-11-29-devvm-hf-program-44th/before.sh /tmp/base > bench/results/2026-11-29-devvm-hf-program-44th/before.txt
set -eu
base=$1
t=$(mktemp -d)
(cd "$base" && go build -o "$t/memplan" ./cmd/memplan)
r=bench/results/2026-11-29-h200-fake-tp-81
for n in 84 85; do
  echo "== held-out set $n, predicted by $(git -C "$base" rev-parse --short HEAD)"
  DEVICE=h200-141gb python3 bench/torch/dist/predict.py bench/torch/dist/heldout-$n.txt "$t/memplan" >"$t/p$n.txt"
  python3 bench/torch/dist/blind.py "$t/p$n.txt" $r/heldout-$n.jsonl
done
echo "== outside the allocator, MiB (device total less peak reserved, the record's largest rank)"
python3 - $r/*.jsonl bench/results/2026-11-28-h200x2-heldout-71/heldout-71.jsonl \
  bench/results/2026-11-26-h200x2-meta-heldout.jsonl <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        d = json.loads(line)
        if not d.get("ok"):
            continue
        ranks = d.get("ranks") or []
        if ranks and "device_used" in ranks[0]:
            out = max(r["device_used"] - r["peak_reserved"] for r in ranks)
        elif "busiest_device_total_used_bytes" in d:
            out = d["busiest_device_total_used_bytes"] - d["busiest_peak_reserved_bytes"]
        else:
            continue
        print("%6d  %s" % (out >> 20, d["label"][:110]))
PY
rm -r "$t"
