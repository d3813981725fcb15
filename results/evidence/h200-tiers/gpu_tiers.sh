#!/bin/bash
# Tiered git sides on the H200 (issue 10): TE 2.16.0 installed (.gpu/setup.sh: yours, sourced here, puts torch and TE 2.16.0 on the path),
# the TE v2.16 source as .te-src/transformer-engine-v2.16.bundle
# (make it: git -C TransformerEngine bundle create $PWD/.te-src/transformer-engine-v2.16.bundle v2.16).
# Three commits on top of tag v2.16, each compared with v2.16 on the PR thread's cells by --strategy auto:
#   pyonly   50 us busy-wait in TransformerEngineBaseModule.prepare_forward (every module, every step)
#            -> overlay: every cell slower
#   csrc     100 us busy-wait in Float8Quantizer::create_tensor (C++, every fp8 quantization)
#            -> extension: both sides' transformer_engine_torch built from their trees; fp8 cells slower,
#               bf16 cells no change; run twice, the second run reuses both builds from the cache
#   version  build_tools/VERSION.txt 2.16.0 -> 2.16.1 -> overlay, with the version note in the bundle
# For each: the time from the command's start to its first measured trial.
#     OUT=/tmp/out bash results/evidence/h200-tiers/gpu_tiers.sh             on the GPU machine, from the repo root (~8 min)
#     bash results/evidence/h200-tiers/gpu_tiers.sh --plan-only              anywhere (CPU): make the commits, print each plan
#                                                        over a fake installed TE; no build, no measuring
# Writes $OUT/log.txt (times, plans, verdicts), $OUT/tiers.md (tables), $OUT/tiers-bundles.tgz (bundles
# under results/evidence/h200-tiers/ plus the extension build logs).
set -u
MODE=${1:-run}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: > "$LOG"
T0=$(date +%s)
BUNDLE=${TE_BUNDLE:-$PWD/.te-src/transformer-engine-v2.16.bundle}
SRC=${TE_SRC:-/tmp/te-src}
log() { echo "$*" | tee -a "$LOG" >&2; }
since() { python3 -c "import time, sys; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }

make_commits() {  # -> branches pyonly, csrc, version in $SRC, each one commit on top of v2.16
  rm -rf "$SRC"
  git clone -q "$BUNDLE" "$SRC" || { log "cannot clone $BUNDLE"; exit 1; }
  local g=(git -C "$SRC" -c user.name=teperf -c user.email=teperf@invalid -c commit.gpgsign=false)
  for what in pyonly csrc version; do
    "${g[@]}" checkout -q -b "$what" v2.16 || exit 1
    python3 scripts/gpu/te_plants.py "$SRC" "$what" > /dev/null || { log "planting $what failed"; exit 1; }
    "${g[@]}" commit -q -a -m "teperf tiers: $what" || exit 1
    log "commit $what: $(git -C "$SRC" log --oneline -1) ($(git -C "$SRC" diff --stat v2.16 HEAD | tail -1))"
  done
}

fake_te_site() {  # a stand-in for the installed TE 2.16.0 (PyPI layout), for --plan-only on a machine without it
  local site=$1
  rm -rf "$site"
  mkdir -p "$site/transformer_engine/wheel_lib" "$site/transformer_engine-2.16.0.dist-info"
  git -C "$SRC" show v2.16:transformer_engine/__init__.py > "$site/transformer_engine/__init__.py"
  printf '\x7fELF fake core' > "$site/transformer_engine/wheel_lib/libtransformer_engine.so"
  printf '\x7fELF fake ext' > "$site/transformer_engine/wheel_lib/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"
  printf 'Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.16.0\n' \
    > "$site/transformer_engine-2.16.0.dist-info/METADATA"
  echo transformer_engine > "$site/transformer_engine-2.16.0.dist-info/top_level.txt"
}

if [ "$MODE" = "--plan-only" ]; then
  PY=${PYTHON:-python3}
  make_commits
  fake_te_site /tmp/te-fake-site
  export TEPERF_CACHE=/tmp/teperf-tiers-plan-cache
  for what in pyonly csrc version; do
    log "== v2.16..$what"
    PYTHONPATH=/tmp/te-fake-site:$PWD $PY -m teperf compare "v2.16..$what" --repo "$SRC" --plan 2>&1 | tee -a "$LOG"
    [ "${PIPESTATUS[0]}" = 0 ] || { log "plan for $what failed"; exit 1; }
  done
  exit 0
fi

if [ -z "${TEPERF_TE_BUILD_SITE:-}" ]; then
  source .gpu/setup.sh >> "$LOG" 2>&1 || { cat "$LOG"; exit 1; }
fi
# the extension build needs cudnn-frontend ($TEPERF_TE_BUILD_SITE) and CUDA_HOME
export PYTHONPATH=$PWD:$TEPERF_TE_BUILD_SITE:$PYTHONPATH
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export TEPERF_CACHE=/tmp/teperf-tiers-cache
rm -rf "$TEPERF_CACHE"  # a fresh cache: the first extension run builds, the second reuses
R=$PWD/results/evidence/h200-tiers
rm -rf "$R"
mkdir -p "$R"
log "setup: $(( $(date +%s) - T0 )) s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cores"
make_commits
SCHEDULE=(--config pr-thread --processes 4 --rounds 1 --trials 4 --iters 50 --warmup 20 --core 7)

job() {  # name limit_s spec: one compare; logs its wall time and the time to its first measured trial
  local name=$1 limit=$2 spec=$3 start first="" rc
  start=$(date +%s.%N)
  timeout --signal=INT "$limit" python3 -m teperf compare "$spec" --repo "$SRC" "${SCHEDULE[@]}" \
    --format markdown --results-dir "$R/$name" > "$OUT/$name.md" 2> "$OUT/$name.err" &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ -z "$first" ] && grep -qs '"kind":"trial"' "$R/$name"/*/records.jsonl; then first=$(since "$start"); fi
    sleep 0.5
  done
  wait $pid
  rc=$?
  log "$name ($spec): rc=$rc wall=$(since "$start") s, first measured trial after ${first:-?} s"
  grep -E "^teperf: (base|strategy|  |.*extension|.*built|.*reused|.*sides ready|.*does not)" "$OUT/$name.err" \
    | head -20 >> "$LOG"
  { echo "## $name: teperf compare $spec (auto)"; echo; cat "$OUT/$name.md"; echo; echo '```'
    grep -v "^\s*$" "$OUT/$name.err" | tail -25; echo '```'; echo; } >> "$OUT/tiers.md"
  rm -f "$OUT/$name.md" "$OUT/$name.err"
}

: > "$OUT/tiers.md"
job extension-1 270 v2.16..csrc     # builds transformer_engine_torch for both sides (~75 s each)
job extension-2 100 v2.16..csrc     # the same again: both from the cache
job overlay 95 v2.16..pyonly
job version 95 v2.16..version
python3 - "$R" >> "$LOG" <<'EOF'
import glob, json, sys
for meta in sorted(glob.glob(f"{sys.argv[1]}/*/*/meta.json")):
    m = json.load(open(meta))
    head = m["sides"]["head"]
    print(meta.split("/")[-3], "strategy", head.get("strategy"), "ext_reused", head.get("ext_reused"),
          "notes", head.get("notes"))
EOF
mkdir -p "$R/extension-build-logs"
for f in "$TEPERF_CACHE"/ext/*/build.log; do [ -f "$f" ] && cp "$f" "$R/extension-build-logs/$(basename "$(dirname "$f")").log"; done
tar czf "$OUT/tiers-bundles.tgz" -C "$PWD" results/evidence/h200-tiers
log "total: $(( $(date +%s) - T0 )) s"
