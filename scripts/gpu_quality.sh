#!/bin/bash
# Measurement quality side by side on the H200 (issue 4), one job at a time on an idle GPU:
# the PR thread's schedule (1 pair, 6 rounds x 9 trials x 300 iters) and teperf's default
# schedule on the same two cells, both A/A (the same installed TE 2.20.2 on both sides).
#     bash scripts/gpu_quality.sh      (writes $OUT/quality.md, $OUT/log.txt, $OUT/bundles.tar.gz)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=.:$PYTHONPATH
R=results/evidence/h200-quality
mkdir -p $R
CELLS=(--config pr-thread --modules LayerNormLinear,LayerNormMLP --recipes bf16 --core 7 --base-python python3 --head-python python3 --no-counters)
job() {  # name timeout args...
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout --signal=INT $lim python3 -m teperf "$@" --format markdown --results-dir $R/$name > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
}
job default 150 compare "${CELLS[@]}" --processes 8 --rounds 2 --trials 3 --iters 100 --warmup 50 --prestart 3
job pr-schedule 160 compare "${CELLS[@]}"
for f in default pr-schedule; do { echo "## $f"; cat "$OUT/$f.md"; tail -2 "$OUT/$f.err"; echo; } >> "$OUT/quality.md"; done
tar czf "$OUT/bundles.tar.gz" $R
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"
