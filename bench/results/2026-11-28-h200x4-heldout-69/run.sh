#!/usr/bin/env bash
# Held-out set 69 on four H200s, one device call:
#   bash bench/results/2026-11-28-h200x4-heldout-69/run.sh
# Results go to $OUT (heldout-69.jsonl, err.txt, env.txt).
exec bash bench/torch/dist/tp-set.sh bench/torch/dist/heldout-69.txt heldout-69 200
