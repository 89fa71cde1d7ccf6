#!/usr/bin/env bash
# Held-out set 72 on one H200 (bench/torch/heldout72.txt), lines started
# until 200 s have passed; results in $OUT (heldout72.jsonl, env.txt,
# err.txt).
exec bash bench/torch/grid-budget.sh bench/torch/heldout72.txt heldout72 200
