#!/bin/bash
# Measurement quality side by side on the H200 (issue 4), one job at a time on an idle GPU.
# Both sides are the same installed TE 2.20.2 (A/A), on the PR thread's cells
# (LayerNormLinear, LayerNormMLP x bf16, fp8_delayed, [8,2,256]) unless said otherwise.
#     bash results/evidence/h200-quality/gpu_quality.sh quality   the old default schedule (two seeds), then the PR thread's
#     bash results/evidence/h200-quality/gpu_quality.sh final     A/A over every eager cell the H200 has, the new default
#                                           schedule, and the planted-slowdown overlay test
#     bash results/evidence/h200-quality/gpu_quality.sh confirm   the new default (two more seeds), the PR schedule on the
#                                           bf16 cells (two more seeds), and the overlay test
# Writes $OUT/<part>.md (tables), $OUT/log.txt, $OUT/overlay.txt, $OUT/bundles.tar.gz.
set -u
PART=${1:-quality}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH
R=$PWD/results/evidence/h200-quality
mkdir -p $R
{
  echo "setup.sh: $(( $(date +%s) - T0 )) s"
  echo "core 7 siblings: $(cat /sys/devices/system/cpu/cpu7/topology/thread_siblings_list 2>&1)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} >> "$OUT/log.txt" 2>&1
AA=(--base-python python3 --head-python python3 --core 7 --no-counters)
DEFAULT=(--processes 8 --rounds 2 --trials 6 --iters 50 --warmup 50)
OLD_DEFAULT=(--processes 8 --rounds 2 --trials 3 --iters 100 --warmup 50)
job() {  # name timeout args...
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout --signal=INT $lim python3 -m teperf "$@" --format markdown --results-dir $R/$name > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
  { echo "## $name ($*)"; echo; cat "$OUT/$name.md"; tail -2 "$OUT/$name.err"; echo; } >> "$OUT/$PART.md"
  rm -f "$OUT/$name.md" "$OUT/$name.err"
}
overlay() {  # the planted-slowdown test: base = installed TE, head = + 200 us busy-wait in LayerNormLinear.forward
  local t=$(date +%s)
  TEPERF_KEEP_BUNDLE=$R/overlay-planted timeout 110 python3 -m pytest -q -m gpu tests/test_gpu_overlay.py -s -p no:cacheprovider > "$OUT/overlay.txt" 2>&1
  echo "overlay-planted: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
}
case $PART in
  quality)
    job default-seed0 150 compare --config pr-thread "${AA[@]}" "${OLD_DEFAULT[@]}" --seed 0
    job pr-schedule 210 compare --config pr-thread "${AA[@]}"
    job default-seed1 150 compare --config pr-thread "${AA[@]}" "${OLD_DEFAULT[@]}" --seed 1 ;;
  final)
    job every-cell-aa 290 compare --config nightly --modes eager "${AA[@]}" --processes 8 --rounds 2 --trials 2 --iters 50 --warmup 20
    job default-6x50 120 compare --config pr-thread "${AA[@]}" "${DEFAULT[@]}"
    overlay ;;
  confirm)
    job default-6x50-seed1 120 compare --config pr-thread "${AA[@]}" "${DEFAULT[@]}" --seed 1
    job default-6x50-seed2 120 compare --config pr-thread "${AA[@]}" "${DEFAULT[@]}" --seed 2
    job pr-schedule-bf16-seed1 95 compare --config pr-thread "${AA[@]}" --recipes bf16 --seed 1
    job pr-schedule-bf16-seed2 95 compare --config pr-thread "${AA[@]}" --recipes bf16 --seed 2
    overlay ;;
esac
tar czf "$OUT/bundles.tar.gz" -C "$PWD" results/evidence/h200-quality
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"
