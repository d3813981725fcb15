#!/bin/bash
# Issue 55's device runs (carry [".gpu", ".te-src"]; start with `source .gpu/setup.sh &&`), one step a call:
#   lanes    the couple-noise decomposition, part 1: A/A (installed TE against itself), the PR thread's 4
#            cells, 12 couples a pair, forked pairs at 1, 2, 4 and 8 lanes (about 6.5 minutes)
#   trials   part 2: trials of 25, 200 and 400 iters (forked, 1 lane); the worker's threads pinned with its
#            main thread or spread (fresh pairs, 2 lanes) (about 8 minutes). Each run's budget is 70 s: on an
#            H100 host the first TE pair took 38 s to start, so a 20 s budget measured nothing (2026-12-07)
#   planted  the README's command, exactly: v2.16..plant (LayerNormLinear.forward spins 12 us) --config
#            pr-thread; then the same with one fixed pair (it must call nothing slower or faster)
#   aa       the README's command on A/A (installed TE against itself); then 4 fresh lanes, prestart off
#   (EXTRA=0 skips each step's second run: for the repeats of planted and aa; ARGS: more compare flags for
#   the first run, e.g. ARGS="--iters 25" for the auto schedule's pilot trial length)
#   iters    the README's command on A/A at pilot trials of 50, 25 and 12 iterations (ITERS), BUDGET (150s) each:
#            the couple noise is a slow drift of the host, so shorter trials may buy more couples a minute at
#            the same sd (gpu-noise-1207); schedule_plan.py's width x sqrt(minutes) compares them
#   fork8    the README's command on A/A with forked pairs on 8 lanes (--spawn forkserver --lanes 8): do
#            forked pairs, 0.6-0.8 s to start after the first, buy +-0.5 % where fresh ones do not (about 6 minutes)
#   truth    issue 56's GPU half: benchmarks/plant_truth.py --te (TE's LayerNormLinear, bf16, a perf_counter
#            or thread_time spin of 0..200 us at the top of its forward): the in-process truth against
#            teperf compare (8 fresh pairs, 4 lanes) per size; $OUT/truth/{table.md,results.json}, truth.log;
#            KINDS and TEPERF_KINDS choose the plants (issue 56 owes KINDS=perf,thread,arith TEPERF_KINDS=thread,arith)
# Each run's table <name>.md and stderr <name>.err are in $OUT/<step>-tables.tgz; figures from benchmarks/schedule_plan.py
# in $OUT/<step>-figures.txt; the bundles in $OUT/<step>-bundles.tgz.
set -u
STEP=${1:?lanes, trials, planted, aa, iters, fork8 or truth}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=$PWD; PY=${PYTHON:-python3}; W=/tmp/teperf-plan; SRC=$W/te-src; R=$W/results-$STEP
mkdir -p "$W" "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE:${PYTHONPATH:-}"
PLANTS=$(ls scripts/gpu/te_plants.py scripts/te_plants.py 2>/dev/null | head -1)
{ nproc; lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))"; nvidia-smi -L; } > "$OUT/machine-$STEP.txt" 2>&1
run() {  # name limit_s env... -- teperf compare args...
  local name=$1 limit=$2 t0; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  t0=$(date +%s)
  echo "== $name: teperf compare $*"
  timeout --signal=INT "$limit" env "${envs[@]}" $PY -m teperf compare "$@" --format markdown \
    --results-dir "$R/$name" > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t0 )) s"
  cat "$OUT/$name.md"; grep -E "schedule auto|budget|precision|no slower" "$OUT/$name.err" | tail -4
}
prepare() {
  [ -d "$SRC" ] && return 0
  git clone -q "$HERE/.te-src/transformer-engine-v2.16.bundle" "$SRC" \
    && git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid checkout -q -B plant v2.16 \
    && $PY "$PLANTS" "$SRC" lnl-forward:12 \
    && git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid commit -q -a -m "teperf: lnl-forward 12 us"
}
AA=(--base-python "$PY" --head-python "$PY" --config pr-thread)
FIXED=(--schedule fixed --processes 1000 --rounds 2 --trials 6 --warmup 50)
case $STEP in
  lanes)
    for v in "l1 1" "l2 2" "l4 4" "l8 8"; do
      set -- $v
      run "$1" 100 X=1 -- "${AA[@]}" "${FIXED[@]}" --lanes "$2" --iters 50 --spawn forkserver --budget 70s
    done
    ;;
  trials)
    for v in "i25 25" "i200 200" "i400 400"; do
      set -- $v
      run "$1" 100 X=1 -- "${AA[@]}" "${FIXED[@]}" --lanes 1 --iters "$2" --spawn forkserver --budget 70s
    done
    run pinned 100 X=1 -- "${AA[@]}" "${FIXED[@]}" --lanes 2 --iters 50 --budget 70s
    run spread 100 TEPERF_SPREAD_THREADS=1 -- "${AA[@]}" "${FIXED[@]}" --lanes 2 --iters 50 --budget 70s
    ;;
  planted)  # about 7 minutes
    prepare && run planted 400 X=1 -- v2.16..plant --repo "$SRC" --config pr-thread ${ARGS:-}
    [ "${EXTRA:-1}" = 0 ] || run one-pair 80 X=1 -- v2.16..plant --repo "$SRC" --config pr-thread --schedule fixed \
      --processes 1 --rounds 2 --trials 6 --iters 100
    ;;
  aa)  # about 6.5 minutes
    run aa 400 X=1 -- "${AA[@]}" ${ARGS:-}
    [ "${EXTRA:-1}" = 0 ] || run l4-noprestart 70 X=1 -- "${AA[@]}" "${FIXED[@]}" --lanes 4 --iters 50 --prestart 0 --budget 45s
    ;;
  iters)  # about 8.5 minutes: does a shorter pilot trial narrow the auto schedule's intervals per minute?
    for n in ${ITERS:-50 25 12}; do
      run "i$n" 200 X=1 -- "${AA[@]}" --iters "$n" --budget "${BUDGET:-150s}"
    done
    ;;
  fork8)  # about 6 minutes
    run fork8 400 X=1 -- "${AA[@]}" --spawn forkserver --lanes 8
    ;;
  truth)  # about 9 minutes: 3 kinds x 6 sizes of truth at 8 s, then 12 compares of ~31 s (2026-12-07)
    timeout --signal=INT 560 $PY benchmarks/plant_truth.py --te --sizes 0,12,25,50,100,200 \
      --kinds "${KINDS:-perf,thread}" --teperf-kinds "${TEPERF_KINDS:-perf}" --processes 8 --max-s 8 --min-blocks 10 --out "$OUT/truth" -- --lanes 4 \
      2>&1 | tee "$OUT/truth.log"
    exit 0
    ;;
esac
$PY benchmarks/schedule_plan.py $(ls -d "$R"/*/2026* 2>/dev/null) > "$OUT/$STEP-figures.txt" 2>&1
cat "$OUT/$STEP-figures.txt"
tar czf "$OUT/$STEP-bundles.tgz" -C "$R" .
# the device returns at most 8 files: every run's table and stderr in one archive
(cd "$OUT" && tar czf "$STEP-tables.tgz" --remove-files ./*.md ./*.err)
