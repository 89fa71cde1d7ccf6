# Thirty-fourth session's cost check (docs/performance.md), on the 2-core
# development machine: base d168962 (the session's start, a worktree) and
# the session's end, alternately on one core, then instructions per 7B
# estimate counted by callgrind in each tree.
git worktree add --detach /tmp/base34 d168962
bash bench/costcheck.sh /tmp/base34 /work/main 2 > out.txt
(cd /tmp/base34 && GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13)
GOGC=off GODEBUG=asyncpreemptoff=1 bash bench/callgrind.sh ./estimate '^BenchmarkEstimate$/^7b-32layer$' 13
