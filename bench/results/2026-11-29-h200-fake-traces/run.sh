#!/usr/bin/env bash
# Forty-fourth session, one H200: bench/torch/dist/trace-82.txt's three fake
# ranks with their allocator histories (Python stacks), each converted by
# snap2events.py to cN-rank0.json.gz; records in $OUT/trace-82.jsonl, lines
# not started within BUDGET seconds (360 then) recorded as not run. The
# recipe is the forty-fifth session's generic trace.sh now (the same steps,
# the grid and the name as arguments).
#   bash bench/results/2026-11-29-h200-fake-traces/run.sh
BUDGET=${BUDGET:-360} TIMEOUT=${TIMEOUT:-150} OUT=${OUT:-/tmp/out-trace82} \
  exec bash bench/results/2026-11-29-h200-fake-45/trace.sh bench/torch/dist/trace-82.txt trace-82
