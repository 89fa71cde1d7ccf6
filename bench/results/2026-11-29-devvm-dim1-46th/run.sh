#!/usr/bin/env bash
# Forty-sixth session, dev VM: what FSDP2's copies for experts sharded along their second dimension changed (the
# copy-out temporaries and the gradients' rearranged copies, estimate's unshard and postBackward). With the tree
# before the change (6f179ed) in BASE (git worktree add --detach /tmp/b46b 6f179ed), from the repository root:
#   BASE=/tmp/b46b bash bench/results/2026-11-29-devvm-dim1-46th/run.sh > bench/results/2026-11-29-devvm-dim1-46th/out.txt
# Every record of a run with --fsdp-experts dim1 or auto (2 and 4 H200s, real NCCL; 16 to 128 fake ranks) against
# both trees' predictions (predict.py, blind.py), and every committed prediction (predictdump) and logged line.
set -eu
base=${BASE:?set BASE to a worktree of the base}
(cd "$base" && go build -o /tmp/mp-dim1-before ./cmd/memplan)
go build -o /tmp/mp-dim1-after ./cmd/memplan
g=bench/torch/dist
two() { cat $g/grid-fsdp-experts.txt $g/grid-fsdp-experts-2.txt $g/heldout-fsdp-experts.txt $g/heldout-fsdp-experts-2.txt | grep -v '^#' | grep .; }
for w in before after; do
  two >/tmp/dim1-grid.txt
  NGPU=2 python3 $g/predict.py /tmp/dim1-grid.txt /tmp/mp-dim1-$w >/tmp/dim1-$w-2.txt
  NGPU=4 python3 $g/predict.py /tmp/dim1-grid.txt /tmp/mp-dim1-$w >/tmp/dim1-$w-4.txt
  { grep auto $g/heldout-88.txt; grep -v '^#' $g/heldout-91.txt; } >/tmp/dim1-fake.txt
  python3 $g/predict.py /tmp/dim1-fake.txt /tmp/mp-dim1-$w >/tmp/dim1-$w-fake.txt
  echo "== $w: 2 x H200"
  python3 $g/blind.py /tmp/dim1-$w-2.txt bench/results/2026-11-28-h200x2-fsdp-experts/*.jsonl
  echo "== $w: 4 x H200"
  python3 $g/blind.py /tmp/dim1-$w-4.txt bench/results/2026-11-28-h200x4-fsdp-experts/*.jsonl
  echo "== $w: fake ranks (set 88's auto line, set 91)"
  python3 $g/blind.py /tmp/dim1-$w-fake.txt bench/results/2026-11-29-h200-fake-45/heldout-88.jsonl \
    bench/results/2026-11-29-h200-fake-46/heldout-88c.jsonl bench/results/2026-11-29-h200-fake-46/heldout-91.jsonl | grep -v "no committed"
done
echo "== predictdump"
bash bench/results/2026-11-28-predictdump-steps/run.sh "$base" . 2>/dev/null | head -1
cmp -s /tmp/pd-before.txt /tmp/pd-after.txt && echo "every committed prediction byte-identical"
echo "== benchlog"
bash $g/benchlog.sh "$base" >/tmp/dim1-log-base.txt
bash $g/benchlog.sh . >/tmp/dim1-log-new.txt
python3 $g/benchlog_diff.py /tmp/dim1-log-base.txt /tmp/dim1-log-new.txt
