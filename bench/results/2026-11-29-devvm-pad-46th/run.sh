#!/usr/bin/env bash
# Forty-sixth session, dev VM: what modelling FSDP2's padded shards changed. With the session's base (1ebd64e) in
# BASE (git worktree add --detach /tmp/b46 1ebd64e), from the repository root:
#   BASE=/tmp/b46 bash bench/results/2026-11-29-devvm-pad-46th/run.sh > bench/results/2026-11-29-devvm-pad-46th/out.txt
# 1. every committed prediction before and after (predictdump, 2026-11-28-predictdump-steps/run.sh);
# 2. the logged multi-GPU lines before and after (benchlog.sh, benchlog_diff.py);
# 3. held-out set 88 against its blind predictions and against the tree's.
set -eu
base=${BASE:?set BASE to a worktree of the base}
echo "== predictdump"
bash bench/results/2026-11-28-predictdump-steps/run.sh "$base" . | tail -n 1
python3 - <<'P'
import json
def load(p):
    return {(x.get("source"), x.get("variant")): x for x in map(json.loads, open(p))}
a, b = load("/tmp/pd-before.txt"), load("/tmp/pd-after.txt")
keys = ("peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes")
for k in a:
    ra, rb = a[k].get("result") or {}, b[k].get("result") or {}
    moved = [f"{m} {ra[m]} -> {rb[m]} ({100 * (rb[m] - ra[m]) / ra[m]:+.2f}%)" for m in keys if ra.get(m) != rb.get(m)]
    if moved:
        print(k[0], "|", k[1][:120], "|", "; ".join(moved))
P
echo "== benchlog"
bash bench/torch/dist/benchlog.sh "$base" >/tmp/pad-log-base.txt
bash bench/torch/dist/benchlog.sh . >/tmp/pad-log-new.txt
python3 bench/torch/dist/benchlog_diff.py /tmp/pad-log-base.txt /tmp/pad-log-new.txt
echo "== held-out set 88, blind (committed predictions)"
cat bench/results/2026-11-29-h200-fake-4[56]/heldout-88*.jsonl >/tmp/all88.jsonl
python3 bench/torch/dist/blind.py bench/results/2026-11-29-heldout88-fake-fsdp-predictions.txt /tmp/all88.jsonl
echo "== held-out set 88 against the tree"
go build -o /tmp/memplan-pad ./cmd/memplan
{ grep -v '^#' bench/torch/dist/heldout-88.txt; grep -v '^#' bench/torch/dist/heldout-88e.txt; } >/tmp/g88.txt
DEVICE=h200-141gb python3 bench/torch/dist/predict.py /tmp/g88.txt /tmp/memplan-pad >/tmp/pred88-after.txt
python3 bench/torch/dist/blind.py /tmp/pred88-after.txt /tmp/all88.jsonl
echo "== summary rows (docs/accuracy.md): set 88 blind, set 88 now, set 89 blind"
python3 bench/results/2026-11-29-devvm-pad-46th/summary.py bench/results/2026-11-29-heldout88-fake-fsdp-predictions.txt bench/results/2026-11-29-h200-fake-4[56]/heldout-88*.jsonl
python3 bench/results/2026-11-29-devvm-pad-46th/summary.py /tmp/pred88-after.txt bench/results/2026-11-29-h200-fake-4[56]/heldout-88*.jsonl
python3 bench/results/2026-11-29-devvm-pad-46th/summary.py bench/results/2026-11-29-heldout89-fake-fsdp-predictions.txt bench/results/2026-11-29-h200-fake-46/heldout-89.jsonl
echo "== held-out set 90, blind"
python3 bench/results/2026-11-29-devvm-pad-46th/summary.py bench/results/2026-11-29-heldout90-fake-fsdp-predictions.txt bench/results/2026-11-29-h200-fake-46/heldout-90.jsonl
