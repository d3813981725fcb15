#!/bin/bash
# issue 32's table rule on a quiet 2-core VM, one hold: done-when 1 eight times, the calibration, make demo
# quiet and under the hog (measuring core 1, hog on core 0)
cd "$(dirname "$0")/../../../.."
E=${1:-/tmp/i32t}; mkdir -p $E
for r in 1 2 3 4 5 6 7 8; do
  echo "== done-when 1, repetition $r $(date -u +%T)"; uptime
  results/evidence/cpu-calibration/aa4.sh $E/aa4-r$r > $E/aa4-r$r.txt 2>&1
done
echo "== calibration $(date -u +%T)"; uptime
.venv/bin/python benchmarks/calibration.py --runs 10 --kinds step --levels 0,4,40us --conditions quiet,hog \
  --markdown $E/calibration.md > $E/calibration.txt 2>&1
echo "== demo quiet $(date -u +%T)"; uptime
.venv/bin/teperf compare --config demo --base-path examples/planted/base --head-path examples/planted/head \
  --core 1 --results-dir $E/demo-quiet > $E/demo-quiet.txt 2>&1
echo "== demo under hog $(date -u +%T)"; uptime
.venv/bin/python -c "import os;os.sched_setaffinity(0,{0})
while True: pass" & HP=$!
.venv/bin/teperf compare --config demo --base-path examples/planted/base --head-path examples/planted/head \
  --core 1 --results-dir $E/demo-hog > $E/demo-hog.txt 2>&1
kill $HP
echo "== end $(date -u +%T)"; uptime
