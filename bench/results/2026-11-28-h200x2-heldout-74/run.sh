#!/usr/bin/env bash
# Held-out set 74 on two GPUs, one device call:
#   bash bench/results/2026-11-28-h200x2-heldout-74/run.sh
# Results in $OUT (heldout-74.jsonl, err.txt, env.txt).
exec bash bench/torch/dist/tp-set.sh bench/torch/dist/heldout-74.txt heldout-74 140
