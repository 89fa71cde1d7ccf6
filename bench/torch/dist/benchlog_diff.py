#!/usr/bin/env python3
"""benchlog_diff.py BEFORE.txt AFTER.txt: sets two trees' multi-GPU bench
logs side by side (the "run LABEL: A% R% D%" lines that
`MEMPLAN_BENCH_LOG=1 go test ./bench -run 'TensorParallel|Pipeline|ContextParallel|MultiGPU|LoRA' -v | grep -o "run .*"`
prints) and prints every line whose figures changed, marked closer or
further where its reserved error moved by more than 0.05 points, then the
counts and the lines more than 3% under in reserved or device total (a
line logged in several tests counts each time).

    python3 bench/torch/dist/benchlog_diff.py /tmp/before.txt /tmp/after.txt
"""
import re, sys


def load(path):
    d = {}
    for line in open(path):
        m = re.match(r"run (.*): ([-+][\d.]+)% ([-+][\d.]+)% ([-+][\d.]+)%", line.strip())
        if m:
            d.setdefault(m.group(1), []).append(tuple(float(m.group(i)) for i in (2, 3, 4)))
    return d


def under(d):
    return sum(1 for k in d for v in d[k] if (v[1] < -3 or v[2] < -3) and "[predicted as paused]" not in k)


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    closer = further = changed = 0
    for k in sorted(a):
        for x, y in zip(a[k], b.get(k, [])):
            if x == y:
                continue
            changed += 1
            mark = "same   "
            if abs(y[1]) < abs(x[1]) - 0.05:
                mark, closer = "closer ", closer + 1
            elif abs(y[1]) > abs(x[1]) + 0.05:
                mark, further = "further", further + 1
            print(mark, k, x, "->", y)
    n = sum(len(v) for v in a.values())
    print("%d of %d lines changed: %d closer, %d further; more than 3%% under: %d before, %d after"
          % (changed, n, closer, further, under(a), under(b)))


if __name__ == "__main__":
    sys.exit(main())
