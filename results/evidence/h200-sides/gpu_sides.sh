#!/bin/bash
# Issue 20 on the H200: the installed TE 2.16.0 (.gpu/setup.sh: yours, sourced here, puts torch and TE 2.16.0 on the path) against
# its PyTorch extension rebuilt from the same v2.16 source (.te-src/transformer-engine-v2.16.bundle),
# A/A in both directions, with what each side imported (content hashes) in the bundles.
#     OUT=/tmp/out bash results/evidence/h200-sides/gpu_sides.sh      on the GPU machine, repo root (~6 min: one ~90 s build)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: > "$LOG"
source .gpu/setup.sh >> "$LOG" 2>&1 || { cat "$LOG"; exit 1; }
export PYTHONPATH=$PWD:$TEPERF_TE_BUILD_SITE:$PYTHONPATH  # the extension build needs cudnn-frontend
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export TEPERF_CACHE=/tmp/teperf-sides-cache
export PYTHONUNBUFFERED=1
rm -rf /tmp/te-src && git clone -q .te-src/transformer-engine-v2.16.bundle /tmp/te-src || exit 1
R=results/evidence/h200-sides
mkdir -p "$R"
python3 results/evidence/h200-sides/gpu_build_aa.py --repo /tmp/te-src --ref v2.16 --out "$R" "$@" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
cp "$TEPERF_CACHE"/ext/*/build.log "$OUT/ext-build.log" 2>/dev/null
tar czf "$OUT/sides-bundles.tgz" "$R"
exit $rc
