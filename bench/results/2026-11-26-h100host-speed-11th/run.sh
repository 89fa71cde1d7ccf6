#!/bin/bash
# eleventh session: CPU timings on the GPU host (quiet) — planner stage/speculation, estimate, report
B=$PWD/bin/speed
R=$OUT/speed; mkdir -p $R
(date -u; nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz"; uptime; command -v /usr/bin/time) > $R/env.txt 2>&1
T=""; [ -x /usr/bin/time ] && T="/usr/bin/time -f maxrss_kb=%M"
cd planner
for p in 1 4 8 16; do
  for v in old stage spec; do
    echo "== GOMAXPROCS=$p $v" >> $R/planner.txt
    GOMAXPROCS=$p $T $B/planner-$v.test -test.run X -test.bench 'Plan70B/simulator' -test.benchtime 1x >> $R/planner.txt 2>&1
  done
done
cd ../estimate
for i in 1 2; do for v in old new; do
  echo "== $v round $i" >> $R/estimate.txt
  GOMAXPROCS=1 $B/estimate-$v.test -test.run X -test.bench '^BenchmarkEstimate$' -test.benchtime 40x >> $R/estimate.txt 2>&1
done; done
cd ../report
for p in 1 16; do for v in old new; do
  echo "== GOMAXPROCS=$p $v" >> $R/report.txt
  GOMAXPROCS=$p $B/report-$v.test -test.run X -test.bench 'Report50x12' -test.benchtime 2x >> $R/report.txt 2>&1
done; done
uptime >> $R/env.txt
grep -h "Benchmark\|==\|maxrss" $R/*.txt | head -150
