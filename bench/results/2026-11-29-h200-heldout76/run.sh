#!/usr/bin/env bash
# Held-out set 76 on one H200 (bench/torch/heldout76.txt), lines started
# until 500 s have passed; results in $OUT (heldout76.jsonl, env.txt,
# err.txt).
exec bash bench/torch/grid-budget.sh bench/torch/heldout76.txt heldout76 500
