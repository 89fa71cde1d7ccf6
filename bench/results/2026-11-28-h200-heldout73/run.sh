#!/usr/bin/env bash
# Held-out set 73 on one H200 (bench/torch/heldout73.txt), lines started
# until 200 s have passed; results in $OUT (heldout73.jsonl, env.txt,
# err.txt).
exec bash bench/torch/grid-budget.sh bench/torch/heldout73.txt heldout73 200
