#!/usr/bin/env bash
# Held-out set 70 on one H200 (bench/torch/heldout70.txt), lines started
# until 480 s have passed; results in $OUT (heldout70.jsonl, env.txt,
# err.txt).
exec bash bench/torch/grid-budget.sh bench/torch/heldout70.txt heldout70 480
