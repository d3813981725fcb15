#!/bin/bash
# --precision on the H200 (issue 11): A/A (the same installed TE on both sides) on the PR thread's
# four cells (LayerNormLinear, LayerNormMLP x bf16, fp8_delayed, [8,2,256]) with --precision 1 --budget 5m.
# The pr-thread config's own schedule is one pair of 6 x 9 x 300 (about 3 minutes a pair); here a pair
# is the default's 2 rounds x 6 trials x 50 iters, so that fresh pairs come every few seconds.
#     source .gpu/setup.sh is done here; run from the repo root:  bash results/evidence/h200-precision/gpu_precision.sh
# Writes $OUT/precision.md (the table), $OUT/precision.json, $OUT/log.txt, $OUT/precision-bundle.tgz.
# Takes about 6 minutes (the budget counts from the first pair's start, TE start-up included; < 9 min).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH
R=$PWD/results/evidence/h200-precision
mkdir -p "$R"
{
  echo "setup.sh: $(( $(date +%s) - T0 )) s"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} >> "$OUT/log.txt" 2>&1
t=$(date +%s)
# SIGINT after 7.5 min at the latest: teperf stops cleanly and keeps every sample (exit 130).
timeout --signal=INT 450 python3 -m teperf compare --config pr-thread --base-python python3 --head-python python3 \
  --precision 1 --budget 5m --rounds 2 --trials 6 --iters 50 --warmup 50 --core 7 --no-counters \
  --fail-on change --format markdown --results-dir "$R" > "$OUT/precision.md" 2> "$OUT/precision.err"
rc=$?
echo "compare --precision 1 --budget 5m: rc=$rc (0: no cell slower/faster; 1: --fail-on change hit) wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
tail -5 "$OUT/precision.err" >> "$OUT/log.txt"
BUNDLE=$(ls -td "$R"/*/ 2>/dev/null | head -1)
if [ -n "$BUNDLE" ]; then
  python3 -m teperf report "$BUNDLE" --format json > "$OUT/precision.json" 2>> "$OUT/log.txt"
  grep '"kind": *"stop"' "$BUNDLE/records.jsonl" >> "$OUT/log.txt"
fi
tar czf "$OUT/precision-bundle.tgz" -C "$PWD" results/evidence/h200-precision
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/precision.md" "$OUT/log.txt"
