#!/bin/bash
# fifth session: command and benchmark timings on the GPU machine's host
cd "$(dirname "$0")/.."
python3 bench/results/2026-11-23-h100-host-timing/timing.py > $OUT/timing.txt 2>&1
cd report && for i in 1 2 3; do GOMAXPROCS=1 ../.gpu/bin/report.test -test.run XXX -test.bench BenchmarkReport50x12 -test.benchtime 2x; done > $OUT/report-bench.txt 2>&1
for i in 1 2; do ../.gpu/bin/report.test -test.run XXX -test.bench BenchmarkReport50x12 -test.benchtime 2x; done > $OUT/report-bench-allcores.txt 2>&1
cd ../estimate && for i in 1 2 3; do GOMAXPROCS=1 ../.gpu/bin/estimate.test -test.run XXX -test.bench 'BenchmarkEstimate$/' -test.benchtime 100x; done > $OUT/estimate-bench.txt 2>&1
nproc > $OUT/host.txt; grep -m1 "model name" /proc/cpuinfo >> $OUT/host.txt; uptime >> $OUT/host.txt
