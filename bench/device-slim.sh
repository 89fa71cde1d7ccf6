#!/usr/bin/env bash
# device-slim.sh out|back: the device copies the working tree (tracked files and untracked ones git does not
# ignore) only up to 64 MiB (/work/.library/device/README.md), and the tracked tree reached about 62 MiB in the
# forty-sixth session. `out` removes from the working tree what no device run reads — the committed traces and
# snapshots under bench/results (*.gz, *.xz, *.tar, *.pickle) and diagnose/testdata — refusing when any of them has
# changes not committed; `back` restores every tracked file the working tree lacks (git ls-files --deleted), and
# nothing else, so results copied in between stay as they are. From the repository root:
#   bash bench/device-slim.sh out; (device call); bash bench/device-slim.sh back
set -eu
cd "$(git rev-parse --show-toplevel)"
case ${1:-} in
out)
  if [[ -n $(git status --porcelain -- bench/results diagnose/testdata | grep -v '^??' || true) ]]; then
    echo "device-slim.sh: bench/results or diagnose/testdata has uncommitted changes; commit them first" >&2
    exit 1
  fi
  before=$(git ls-files -z | xargs -0 stat -c %s | awk '{s+=$1} END{print s}')
  { git ls-files -z -- 'bench/results/*.gz' 'bench/results/*.xz' 'bench/results/*.tar' 'bench/results/*.pickle'
    git ls-files -z -- diagnose/testdata; } | xargs -0 rm -f
  after=$(git ls-files -z | while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    xargs -0 stat -c %s | awk '{s+=$1} END{print s}')
  awk -v b="$before" -v a="$after" 'BEGIN{printf "tracked files in the working tree: %.1f MiB -> %.1f MiB\n", b/2^20, a/2^20}'
  ;;
back)
  git ls-files -z --deleted | xargs -0 -r git checkout --
  echo "restored: $(git ls-files --deleted | wc -l) tracked files still missing"
  ;;
*)
  echo "usage: bench/device-slim.sh out|back" >&2
  exit 2
  ;;
esac
