#!/usr/bin/env bash
# Forty-sixth session: the forty-third session's cmd-times.sh (the estimate command over specs/*.yaml, least of seven
# runs each, default and static builds, one core and all) for the tree before the buffers were sized once (BASE) and
# for this tree, one after the other, from the repository root:
#   BASE=/tmp/b46c bash bench/results/2026-11-29-devvm-speed-46th/cmd-times.sh > bench/results/2026-11-29-devvm-speed-46th/cmd-times.txt 2>&1
set -u
base=${BASE:?set BASE to a worktree of the base}
for tree in "$base" "$PWD" "$base" "$PWD"; do
  echo "== $tree ($(git -C "$tree" rev-parse --short HEAD))"
  (cd "$tree" && bash "$OLDPWD/bench/results/2026-11-29-devvm-speed-43rd/cmd-times.sh" 2>&1 | tail -8)
done
