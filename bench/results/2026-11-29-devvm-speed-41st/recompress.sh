#!/bin/bash
# recompress.sh: checks the forty-first session's recompression of
# bench/results' thirteen .tar archives (gzipped histories and snapshots,
# as the GPU runs wrote them) into .tar.xz archives of the same files
# gunzipped (bench/results/README.md, "Forty-first session"): for each
# archive of commit 120cf35 (the last before it), every file, gunzipped,
# against the same file extracted from the .tar.xz now in the tree. Made by
#   tar xf X.tar -C D; find D -name '*.gz' -exec gunzip {} \;
#   tar cf - --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-11-29 00:00Z' -C D ... | xz -9e -T1 >X.tar.xz
# Run from the repository root; output: recompress.txt beside it.
set -euo pipefail
before=120cf35
date -u; git log --oneline -1 "$before"
total0=0 total1=0
for f in $(git ls-tree -r --name-only "$before" bench/results | grep '\.tar$'); do
	a=$(mktemp -d) b=$(mktemp -d)
	git show "$before:$f" | tar xf - -C "$a"
	(cd "$a" && find . -name '*.gz' -exec gunzip {} \;)
	tar xf "$f.xz" -C "$b"
	x=$(cd "$a" && find . -type f | sort | xargs sha1sum)
	y=$(cd "$b" && find . -type f | sort | xargs sha1sum)
	n0=$(git cat-file -s "$before:$f") n1=$(stat -c %s "$f.xz")
	total0=$((total0 + n0)) total1=$((total1 + n1))
	if [[ $x == "$y" ]]; then v=identical; else v=DIFFERENT; fi
	echo "$f: $n0 -> $n1 bytes, $(echo "$y" | wc -l) files $v"
	rm -rf "$a" "$b"
done
echo "total $total0 -> $total1 bytes"
