#!/bin/bash
# The H200 evidence run (issue 4), in one device call of under 10 minutes.
# On the GPU machine, from the repo root, with .gpu/ carried:
#     bash results/evidence/h200/gpu_evidence.sh        (writes $OUT/tables.md, $OUT/log.txt, $OUT/bundles.tar.gz)
# Three jobs run side by side on far-apart cores (the GPU machine has 16):
#   A  core 3:  teperf run over every module x recipe x mode the H200 has (short schedule)
#   B  core 7:  A/A of teperf/configs/pr-thread.toml with the PR thread's schedule (1 pair, 6x9x300),
#               then the same cells with teperf's default schedule: interval width per second
#   C  core 11: A/A over every eager cell with a short multi-pair schedule
# Both sides of each A/A are the same installed TE 2.20.2.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=.:$PYTHONPATH
R=results/evidence/h200
mkdir -p $R
TP="python3 -m teperf"
{
  echo "setup.sh: $(( $(date +%s) - T0 )) s"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $TP doctor --core 7 || true
} >> "$OUT/log.txt" 2>&1

job() {  # name timeout args...
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout --signal=INT $lim $TP "$@" --format markdown --results-dir $R/$name > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
}
(job nightly-run 380 run --config nightly --core 3 --processes 1 --rounds 1 --trials 3 --iters 100 --warmup 10) &
(job pr-thread-aa 200 compare --config pr-thread --core 7 --base-python python3 --head-python python3
 job default-aa 180 compare --config pr-thread --core 7 --processes 6 --rounds 2 --trials 3 --iters 200 --base-python python3 --head-python python3 --no-counters) &
(job every-cell-aa 380 compare --config nightly --modes eager --core 11 --processes 4 --rounds 1 --trials 3 --iters 50 --warmup 10 --base-python python3 --head-python python3 --no-counters) &
wait
for f in nightly-run pr-thread-aa default-aa every-cell-aa; do
  { echo; echo "## $f"; echo; cat "$OUT/$f.md"; echo; tail -3 "$OUT/$f.err"; } >> "$OUT/tables.md"
done
tar czf "$OUT/bundles.tar.gz" results/evidence/h200
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"
