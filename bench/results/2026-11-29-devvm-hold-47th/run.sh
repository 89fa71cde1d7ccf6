#!/usr/bin/env bash
# Forty-seventh session: what Phi-3's o_proj first (out_first), the base model's inputs_embeds held to its return and
# Gemma's embedding scale inside the module under TP change in memplan's figures: every logged bench line
# (bench/torch/dist/benchlog.sh, set side by side by benchlog_diff.py) and every committed prediction
# (internal/predictdump), at BEFORE (96079f0, the session's base) and AFTER.
#   git worktree add --detach /tmp/b47 96079f0
#   bash bench/results/2026-11-29-devvm-hold-47th/run.sh /tmp/b47 . > bench/results/2026-11-29-devvm-hold-47th/out.txt
set -eu
before=${1:?usage: run.sh BEFORE_TREE AFTER_TREE}
after=${2:?usage: run.sh BEFORE_TREE AFTER_TREE}
here=$(cd "$(dirname "$0")" && pwd)
(cd "$after" && git log --oneline -1)
bash "$here/../../torch/dist/benchlog.sh" "$before" >/tmp/hold47-before.txt
bash "$here/../../torch/dist/benchlog.sh" "$after" >/tmp/hold47-after.txt
python3 "$here/../../torch/dist/benchlog_diff.py" /tmp/hold47-before.txt /tmp/hold47-after.txt
(cd "$before" && go build -o /tmp/pd47-before ./internal/predictdump) && (cd "$after" && /tmp/pd47-before >/tmp/pd47-before.txt)
(cd "$after" && go build -o /tmp/pd47-after ./internal/predictdump && /tmp/pd47-after >/tmp/pd47-after.txt)
python3 "$here/pdcmp.py" /tmp/pd47-before.txt /tmp/pd47-after.txt
