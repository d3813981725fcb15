#!/bin/bash
# Issue 36 on real TE (H200): backfill a TE history and explain its change points, in ONE device call.
# TE 2.16.0 installed (.gpu/setup.sh, sourced here); the TE v2.16 source as .te-src/transformer-engine-v2.16.bundle
# (git -C TransformerEngine bundle create $PWD/.te-src/transformer-engine-v2.16.bundle v2.16). Eight commits on top of tag v2.16
# (scripts/gpu/te_plants.py), six harmless (a comment in a .py file), two planted one night apart:
#   c3  prepare_forward calls a helper 20 times, 5 us each (every module: +20 Python calls)
#   c5  LayerNormLinear.forward spins 50 us (no counter moves)
# Nights every 2nd commit (v2.16, c2, c4, c6, c8): the steps land in two neighbouring nights (c2..c4, c4..c6),
# as vq's 1.18.0 and 1.18.1 did; --explain must bisect each to its commit. Then the same command again: it
# must resume (nothing measured, nothing bisected again).
#     run(command="OUT=$OUT bash results/evidence/h200-backfill/gpu_te_backfill.sh", carry=[".gpu", ".te-src"], timeout_s=600)
#     bash results/evidence/h200-backfill/gpu_te_backfill.sh --plan-only     anywhere (CPU): make the commits, dry-run the backfill
# Writes $OUT/log.txt, $OUT/changes.txt and $OUT/history.tgz (history, bundles, each run's stdout/stderr,
# changes.json). TEPERF_CODE: another teperf checkout to run (default: this one).
# The commits carry fixed dates, so every call makes the same SHAs: HIST_IN=DIR (a history.tgz of an earlier call,
# unpacked under an ignored path and carried) starts from that call's store, and the backfill resumes it.
# RANGE/EVERY/PROCS/TRIALS/ITERS/MODULES change what is measured (default: v2.16..c8, every 2nd, 4x4x50).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/log.txt; : > "$LOG"
T0=$(date +%s)
BUNDLE=${TE_BUNDLE:-$PWD/.te-src/transformer-engine-v2.16.bundle}
SRC=${TE_SRC:-/tmp/te-src}
BUDGET=${BUDGET:-430s}
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG" >&2; }

rm -rf "$SRC"
git clone -q "$BUNDLE" "$SRC" || { log "cannot clone $BUNDLE"; exit 1; }
g=(git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid -c commit.gpgsign=false)
"${g[@]}" checkout -q -b nightly v2.16 || exit 1
PLANTS=(- comment:constants.py comment:utils.py calls comment:fp8.py lnl-forward comment:jit.py comment:graph.py
        comment:export.py)
for i in 1 2 3 4 5 6 7 8; do
  what=$(python3 scripts/gpu/te_plants.py "$SRC" "${PLANTS[$i]}") || { log "making commit $i failed"; exit 1; }
  at="2026-12-03T06:04:$([ $i -ge 7 ] && echo 32 || echo 31)+0000"  # the dates of the first H200 call
  GIT_AUTHOR_DATE=$at GIT_COMMITTER_DATE=$at "${g[@]}" commit -q -a -m "teperf nightly fixture $i: $what" || exit 1
  "${g[@]}" tag "c$i"
done
git -C "$SRC" log --oneline v2.16..c8 >> "$LOG"
H=$OUT/work/history; R=$OUT/work/results
mkdir -p "$OUT/work"
[ -n "${HIST_IN:-}" ] && cp -r "$HIST_IN/history" "$H" && log "resuming the store of $HIST_IN ($(ls "$H" | wc -l) files)"
ARGS=(--repo "$SRC" --ref nightly --backfill "${RANGE:-v2.16..c8}" --every "${EVERY:-2}" --explain --budget "$BUDGET"
      --config pr-thread --modules "${MODULES:-LayerNormLinear,LayerNormMLP}" --recipes bf16 --strategy overlay
      --processes "${PROCS:-4}" --rounds 1 --trials "${TRIALS:-4}" --iters "${ITERS:-50}" --warmup 20
      --core "${CORE:-7}" --history "$H" --results-dir "$R")

if [ "${1:-}" = "--plan-only" ]; then
  python3 -m teperf nightly "${ARGS[@]}" --dry-run 2>&1 | tee -a "$LOG"
  exit "${PIPESTATUS[0]}"
fi
source .gpu/setup.sh >> "$LOG" 2>&1 || { cat "$LOG"; exit 1; }
export PYTHONPATH=${TEPERF_CODE:-$PWD}:$PYTHONPATH TEPERF_CACHE=/tmp/teperf-nightly-cache
log "setup done; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cores"
for run in 1 2; do
  t=$(date +%s); limit=$([ $run = 1 ] && echo "${RUN1_S:-470}" || echo "${RUN2_S:-90}")
  timeout --signal=INT --kill-after=15 "$limit" python3 -m teperf nightly "${ARGS[@]}" > "$OUT/run$run.out" 2> "$OUT/run$run.err"
  log "run $run: rc=$? wall=$(( $(date +%s) - t )) s"
  tail -15 "$OUT/run$run.err" >> "$LOG"
done
python3 -m teperf history --history "$H" --changes > "$OUT/changes.txt" 2>> "$LOG"
python3 -m teperf history --history "$H" --changes --format json > "$OUT/changes.json" 2>> "$LOG"
cat "$OUT/changes.txt" >> "$LOG"
mv "$OUT"/run?.* "$OUT/changes.json" "$OUT/work/"
tar czf "$OUT/history.tgz" -C "$OUT/work" . 2>> "$LOG" && rm -rf "$OUT/work"
log "total"
cat "$LOG"
