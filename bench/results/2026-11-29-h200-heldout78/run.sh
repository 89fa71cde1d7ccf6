#!/usr/bin/env bash
# Held-out set 78 on one H200 (bench/torch/heldout78.txt), lines started
# until 480 s have passed; results in $OUT (heldout78.jsonl, env.txt,
# err.txt). Compare with the predictions committed before the run:
#   python3 bench/torch/heldout.py bench/results/2026-11-29-heldout78-predictions.txt \
#       bench/results/2026-11-29-h200-heldout78.jsonl
exec bash bench/torch/grid-budget.sh bench/torch/heldout78.txt heldout78 480
