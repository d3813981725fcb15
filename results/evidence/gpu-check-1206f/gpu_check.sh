#!/bin/bash
# Kept here with the last set it made (it was scripts/gpu/check.sh until 2026-12-07): scripts/gpu/plan_check.sh's
# `aa` and `planted` steps supersede it.
# One H200 device call that checks the TE path end to end with today's code (TE 2.16.0 from .gpu/, the TE
# v2.16 source bundle in .te-src/; carry [".gpu", ".te-src"]), after `source .gpu/setup.sh &&`:
#   aa:      the PR thread's 4 cells, installed TE against itself, 4 lanes, --precision 0.5 --budget 3m
#   planted: git overlay v2.16..lnl (50 us busy-wait in LayerNormLinear.forward; LayerNormMLP untouched, so
#            its cells are A/A), the same schedule, --budget 2m: LayerNormLinear must read slower
# Each step's table is $OUT/<step>.md, its stderr $OUT/<step>.err; the bundles are $OUT/bundles.tgz.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=$PWD; PY=${PYTHON:-python3}; W=/tmp/teperf-check; SRC=$W/te-src; R=$W/results
mkdir -p "$W" "$R"
export PYTHONUNBUFFERED=1
SCHED=(--config pr-thread --lanes 4 --precision 0.5 --rounds 2 --trials 6 --iters 50 --warmup 50 --format markdown)
measure() {  # name limit_s args...
  local name=$1 limit=$2 t0; shift 2
  t0=$(date +%s)
  echo "== $name: teperf compare $*"
  timeout --signal=INT "$limit" env PYTHONPATH="$HERE:${PYTHONPATH:-}" $PY -m teperf compare "$@" "${SCHED[@]}" \
    --results-dir "$R/$name" > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t0 )) s"
  cat "$OUT/$name.md"; grep -vE "^\s*$" "$OUT/$name.err" | tail -25
}
measure aa 260 --base-python "$PY" --head-python "$PY" --budget 3m
git clone -q "$HERE/.te-src/transformer-engine-v2.16.bundle" "$SRC" \
  && git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid checkout -q -B lnl v2.16 \
  && $PY scripts/gpu/te_plants.py "$SRC" lnl-forward \
  && git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid commit -q -a -m "teperf: lnl-forward" \
  && measure planted 200 v2.16..lnl --repo "$SRC" --budget 2m
tar czf "$OUT/bundles.tgz" -C "$R" .
