#!/bin/bash
cd /work/main
E=/tmp/i32b; mkdir -p $E
echo "== done-when 1 $(date -u +%T)"; uptime
results/evidence/cpu-calibration/aa4.sh $E/aa4 > $E/aa4.txt 2>&1
echo "== calibration $(date -u +%T)"; uptime
.venv/bin/python benchmarks/calibration.py --runs 10 --kinds step --levels 0,40us --conditions quiet,hog --markdown $E/calibration.md > $E/calibration.txt 2>&1
echo "== demo under hog $(date -u +%T)"; uptime
.venv/bin/python -c "import os;os.sched_setaffinity(0,{0})
while True: pass" & HP=$!
.venv/bin/teperf compare --config demo --base-path examples/planted/base --head-path examples/planted/head --core 1 --results-dir $E/demo-hog > $E/demo-hog.txt 2>&1
kill $HP
echo "== end $(date -u +%T)"; uptime
