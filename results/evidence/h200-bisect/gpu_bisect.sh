#!/bin/bash
# teperf bisect on the H200 (issue 12): TE 2.16.0 installed (.gpu/setup.sh: yours, sourced here, puts torch and TE 2.16.0 on the path),
# the TE v2.16 source as .te-src/transformer-engine-v2.16.bundle
# (make it: git -C TransformerEngine bundle create $PWD/.te-src/transformer-engine-v2.16.bundle v2.16).
# Ten commits on top of tag v2.16 (scripts/gpu/te_plants.py), eight harmless (a comment in a .py file), two planted:
#   commit 4  Python: prepare_forward (every module, every forward) calls a helper 20 times, 5 us each
#             -> found by counters (+20 Python calls per step), then confirmed slower in time
#   commit 8  C++: 100 us busy-wait in Float8Quantizer::create_tensor (every fp8 quantization), no counter
#             change -> found by paired timing; needs the extension tier (each side's
#             transformer_engine_torch built from its tree, ~75 s per build, cached)
# Run "py": teperf bisect v2.16..c7 --cell LayerNormLinear/bf16 (7 commits, counters)
# Run "csrc": teperf bisect c7..c10 --cell LayerNormLinear/fp8_delayed (3 commits, timing; skipped with a
#             message when this teperf has no --strategy extension)
#     OUT=/tmp/out bash results/evidence/h200-bisect/gpu_bisect.sh py     on the GPU machine, repo root (~4 min)
#     OUT=/tmp/out bash results/evidence/h200-bisect/gpu_bisect.sh csrc   then this (~5-6 min: two extension builds, ~75 s each)
#     OUT=/tmp/out bash results/evidence/h200-bisect/gpu_bisect.sh all    both in one call (~9-10 min: may not fit a 10-minute call)
#     bash results/evidence/h200-bisect/gpu_bisect.sh --plan-only                  anywhere (CPU): make the commits, print both plans
#                                                             over a fake installed TE; nothing built or measured
# Writes $OUT/log.txt (plans, probe logs, culprits, times), $OUT/bisect.md (reports),
# $OUT/bisect-bundles.tgz (the bisect bundles under results/evidence/h200-bisect/, nested compares included).
set -u
MODE=${1:-all}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: > "$LOG"
T0=$(date +%s)
BUNDLE=${TE_BUNDLE:-$PWD/.te-src/transformer-engine-v2.16.bundle}
SRC=${TE_SRC:-/tmp/te-src}
PY=${PYTHON:-python3}
log() { echo "$*" | tee -a "$LOG" >&2; }

make_commits() {  # -> tags c1..c10 in $SRC, on branch bisect from v2.16
  rm -rf "$SRC"
  git clone -q "$BUNDLE" "$SRC" || { log "cannot clone $BUNDLE"; exit 1; }
  local g=(git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid -c commit.gpgsign=false)
  "${g[@]}" checkout -q -b bisect v2.16 || exit 1
  local i what
  local PLANTS=(- comment:constants.py comment:utils.py comment:fp8.py calls comment:jit.py comment:graph.py
                comment:distributed.py csrc comment:export.py comment:quantization.py)
  for i in 1 2 3 4 5 6 7 8 9 10; do
    what=$($PY scripts/gpu/te_plants.py "$SRC" "${PLANTS[$i]}") || { log "making commit $i failed"; exit 1; }
    "${g[@]}" commit -q -a -m "teperf bisect fixture $i: $what" || exit 1
    "${g[@]}" tag "c$i"
  done
  log "commits on v2.16 ($(git -C "$SRC" rev-parse --short v2.16)):"
  git -C "$SRC" log --oneline --stat v2.16..c10 | grep -E "^[0-9a-f]{7,} | \| " >> "$LOG"
}

PY_RUN=(v2.16..c7 --cell LayerNormLinear/bf16)
CSRC_RUN=(c7..c10 --cell LayerNormLinear/fp8_delayed)
SCHEDULE=(--config pr-thread --processes 3 --rounds 1 --trials 4 --iters 50 --warmup 20)

if [ "$MODE" = "--plan-only" ]; then
  make_commits
  site=/tmp/te-fake-site  # a stand-in for the installed TE 2.16.0 (its PyPI layout)
  rm -rf "$site"
  mkdir -p "$site/transformer_engine/wheel_lib" "$site/transformer_engine-2.16.0.dist-info"
  git -C "$SRC" show v2.16:transformer_engine/__init__.py > "$site/transformer_engine/__init__.py"
  printf '\x7fELF fake' > "$site/transformer_engine/wheel_lib/libtransformer_engine.so"
  printf 'Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.16.0\n' \
    > "$site/transformer_engine-2.16.0.dist-info/METADATA"
  echo transformer_engine > "$site/transformer_engine-2.16.0.dist-info/top_level.txt"
  for run in PY_RUN CSRC_RUN; do
    declare -n args=$run
    log "== teperf bisect ${args[*]} --plan"
    PYTHONPATH=$site:$PWD TEPERF_CACHE=/tmp/teperf-bisect-plan-cache $PY -m teperf bisect "${args[@]}" \
      --repo "$SRC" "${SCHEDULE[@]}" --device cuda --plan 2>&1 | tee -a "$LOG"
    [ "${PIPESTATUS[0]}" = 0 ] || { log "plan failed"; exit 1; }
  done
  exit 0
fi

if [ -z "${TEPERF_TE_BUILD_SITE:-}" ]; then
  source .gpu/setup.sh >> "$LOG" 2>&1 || { cat "$LOG"; exit 1; }
fi
export PYTHONPATH=$PWD:$TEPERF_TE_BUILD_SITE:$PYTHONPATH  # the extension build needs cudnn-frontend
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export TEPERF_CACHE=/tmp/teperf-bisect-cache
R=$PWD/results/evidence/h200-bisect
mkdir -p "$R"
log "setup: $(( $(date +%s) - T0 )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cores"
make_commits
: > "$OUT/bisect.md"

bisect() {  # name limit_s args...: one teperf bisect, its report into bisect.md, its figures into the log
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  rm -rf "${R:?}/$name"
  timeout --signal=INT "$limit" python3 -m teperf bisect "$@" --repo "$SRC" "${SCHEDULE[@]}" --core 7 \
    --format markdown --results-dir "$R/$name" > "$OUT/$name.md" 2> "$OUT/$name.err"
  rc=$?
  log "$name (teperf bisect $*): rc=$rc, $(( $(date +%s) - start )) s"
  grep "^teperf bisect:" "$OUT/$name.err" >> "$LOG"
  [ $rc = 0 ] || tail -5 "$OUT/$name.err" >> "$LOG"
  { echo "## $name: teperf bisect $*"; echo; cat "$OUT/$name.md"; echo; } >> "$OUT/bisect.md"
  $PY - "$R/$name" "$SRC" >> "$LOG" <<'EOF'
import glob, json, subprocess, sys
for meta in sorted(glob.glob(f"{sys.argv[1]}/*/meta.json")):
    m = json.load(open(meta))
    r = m.get("result") or {}
    tags = {}
    for line in subprocess.run(["git", "-C", sys.argv[2], "tag", "--points-at", (r.get("culprit") or {}).get("sha", "HEAD")],
                               capture_output=True, text=True).stdout.split():
        tags[line] = 1
    print(f"  result: {r.get('status')} by {r.get('mode')}; culprit {(r.get('culprit') or {}).get('short_sha')} "
          f"(tags {', '.join(tags) or '-'}); {r.get('probes')} probes (plan {m['plan']['expected_probes']}); "
          f"{r.get('wall_s')} s; confirm {((r.get('confirm') or {}).get('row') or {}).get('verdict')}")
EOF
}

if [ "$MODE" = all ] || [ "$MODE" = py ]; then
  bisect py 290 "${PY_RUN[@]}"
fi
if [ "$MODE" = all ] || [ "$MODE" = csrc ]; then
  if python3 -m teperf bisect --help | grep -q "extension"; then
    bisect csrc 540 "${CSRC_RUN[@]}"
  else
    log "csrc: skipped: this teperf has no --strategy extension (issue 10), so a csrc commit cannot be built"
  fi
fi
tar czf "$OUT/bisect-bundles.tgz" -C "$PWD" results/evidence/h200-bisect
log "total: $(( $(date +%s) - T0 )) s"
