#!/usr/bin/env bash
# Held-out set 79 on one H200 (bench/torch/heldout79.txt), lines started
# until 340 s have passed, each allowed 240 s (7-8B models built on the
# host first); results in $OUT (heldout79.jsonl, env.txt, err.txt).
# Compare with the predictions committed before the run:
#   python3 bench/torch/heldout.py bench/results/2026-11-29-heldout79-predictions.txt \
#       bench/results/2026-11-29-h200-heldout79.jsonl
TIMEOUT=240 exec bash bench/torch/grid-budget.sh bench/torch/heldout79.txt heldout79 340
