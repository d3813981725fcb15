#!/bin/bash
# The issue's two done-when compares with a CPU hog pinned to each core (run from the repository root):
#   1. the "+45 us package": the demo's base tree against a copy whose MLP spins 45 us per step
#      (benchmarks/calibration.py's plant), `--fail-on slower`: must exit 1;
#   2. `make demo`'s compare (examples/planted/base vs head), `--fail-on slower`: MLP must read slower.
# Usage: bash results/evidence/cpu-calibration/busy-1205b/hogs.sh OUT_DIR
set -u
out=${1:?OUT_DIR}
mkdir -p "$out"
py=.venv/bin/python
$py -c "import sys; sys.path.insert(0, '.'); from pathlib import Path; from benchmarks.calibration import make_side; make_side(Path(sys.argv[1]), 45.0, 0.0)" "$out/head45"
hogs=()
for core in $($py -c "from teperf.cpus import available_cores; print(*available_cores())"); do
    $py -c "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})
while True: pass" "$core" &
    hogs+=($!)
done
echo "hogs ${hogs[*]} on cores $($py -c "from teperf.cpus import available_cores; print(*available_cores())")"
run() {  # name, head path
    echo "== $1: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    .venv/bin/teperf compare --config demo --base-path examples/planted/base --head-path "$2" \
        --fail-on slower --results-dir "$out/$1-bundles" > "$out/$1.txt" 2>&1
    echo "exit $?" | tee -a "$out/$1.txt"
    echo "   done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    .venv/bin/teperf report "$out/$1-bundles"/* --format csv > "$out/$1-rows.csv" 2>&1
}
run plus45 "$out/head45"
run demo examples/planted/head
kill "${hogs[@]}"
