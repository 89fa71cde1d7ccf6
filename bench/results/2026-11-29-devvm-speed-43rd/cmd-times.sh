#!/usr/bin/env bash
# The estimate command's wall time over specs/*.yaml, least of 7 runs each, for
# the default build and the static one (-tags nodriver), on one core and on all,
# from the repository root:
#   bash bench/results/2026-11-29-devvm-speed-43rd/cmd-times.sh > cmd-times.txt
set -eu
go build -o /tmp/mp-default ./cmd/memplan
CGO_ENABLED=0 go build -tags nodriver -o /tmp/mp-static ./cmd/memplan
uptime
python3 - <<'PY'
import glob, os, subprocess, time
for b in ("/tmp/mp-default", "/tmp/mp-static"):
    for cores in ("1", ""):
        env = dict(os.environ)
        if cores:
            env["GOMAXPROCS"] = cores
        res = []
        for s in sorted(glob.glob("specs/*.yaml")):
            ts = []
            for _ in range(7):
                t = time.perf_counter()
                subprocess.run([b, "estimate", s], capture_output=True, env=env)
                ts.append(time.perf_counter() - t)
            res.append((os.path.basename(s)[:-5], 1000 * min(ts)))
        print(b, "GOMAXPROCS=" + (cores or "all"), "within 5 ms: %d of %d" % (sum(v <= 5 for _, v in res), len(res)))
        print("  " + " ".join("%s %.1f" % r for r in res))
PY
