#!/usr/bin/env bash
# The bundled transformers configs under tensor, context and pipeline parallelism (tp 2 with sp, tp 2 without, cp
# 2, pp 2 1F1B; 4,096 tokens, AMP, with and without checkpointing, on an H200) estimated by the parent tree in BASE
# and by this tree, and what changed: the peak reserved of each, or the error one of them gives.
#   git worktree add --detach /tmp/base HEAD~N
#   bash bench/results/2026-11-29-devvm-hf-program-44th/layouts-diff.sh /tmp/base > layouts-diff.txt
set -u
base=$1
t=$(mktemp -d)
(cd "$base" && go build -o "$t/old" ./cmd/memplan)
go build -o "$t/new" ./cmd/memplan
for f in model/testdata/hf/*.json; do
  for lay in "--tp 2 --sp" "--tp 2" "--cp 2" "--pp 2 --grad-accum 4"; do
    for ck in none every-block; do
      args="--hf $f --seq 4096 --batch 1 --precision amp-bf16 --checkpointing $ck $lay --device h200-141gb --format json"
      # shellcheck disable=SC2086
      a=$("$t/old" estimate $args 2>&1 | python3 -c 'import json,sys
try: print(json.load(sys.stdin)["peak_reserved_bytes"])
except Exception: print("error")')
      # shellcheck disable=SC2086
      b=$("$t/new" estimate $args 2>&1 | python3 -c 'import json,sys
try: print(json.load(sys.stdin)["peak_reserved_bytes"])
except Exception: print("error")')
      if [[ $a != "$b" ]]; then
        if [[ $a == error || $b == error ]]; then
          echo "$f $lay $ck: $a -> $b"
        else
          awk -v a="$a" -v b="$b" -v l="$f $lay $ck" 'BEGIN{printf "%s: %+.2f%% reserved (%d -> %d MiB)\n", l, 100*(b/a-1), a/1048576, b/1048576}'
        fi
      fi
    done
  done
done
rm -r "$t"
