#!/bin/bash
# H200 evidence for one-time costs under issue 32's rule (Hodges-Lehmann + exact signed-rank interval over
# pairs, min effect = max(--min-effect-once, the cell's A/A spread)) and its table rule (Benjamini-Hochberg
# over a compare's cells; a one-time cell needs 2 / 2**pairs <= 0.05 / cells: 10 pairs for eager+cuda-graph's
# 16 cells, 9 for compile's 12; "too few pairs" below). ONE device
# call of at most 9 minutes, from the repo root with .gpu/ carried (TE 2.16.0):
#     OUT=/tmp/out bash results/evidence/h200-onetime/gpu_onetime.sh          (run(command="OUT=$OUT bash results/evidence/h200-onetime/gpu_onetime.sh",
#                                                          carry=[".gpu"], timeout_s=560))
# A/A of the PR thread's cells (--config pr-thread: LayerNormLinear/LayerNormMLP x bf16/fp8 delayed, [8,2,256]),
# TE on both sides, PAIRS (10) pairs a run, jobs side by side on their own measuring cores, each repeating its
# run until the deadline (LIMIT s after the start, default 470) leaves less than one run's time:
#   eager-N       cores 2-4, 5-7:   --modes eager,cuda-graph   (8 first-call cells a run, cheap: most runs)
#   compile-N     cores 8-10, 11-13: --modes compile, cold cache (4 first-call + 4 recompile cells a run)
#   warm          cores 0-1,14-15:  --modes compile --compile-cache warm, once: every compile first call must find
#                             every graph in the cache, or the run's footer (and the summary) says why not
# At least 64 one-time cells in all (the summary counts them and says if fewer). Written as it goes, so a
# call cut short still brings back what ran: $OUT/log.txt (what ran, rc and wall time per run),
# $OUT/<job>/<n>.json|.err and the bundles under $OUT/<job>/<n>/; at the end $OUT/summary.md (printed):
# per mode and cost, A/A cells with a verdict, false slower/faster and their rate with its Wilson interval,
# the min effects the rule used; the warm job's cache hits per cell (copy $OUT to results/evidence/h200-onetime/).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
LIMIT=${LIMIT:-470}   # s after the start by which every job ends (then the summary, about 20 s)
PAIRS=${PAIRS:-10}
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/log.txt"; }
log "gpu_onetime.sh: OUT=$OUT LIMIT=$LIMIT PAIRS=$PAIRS; source .gpu/setup.sh"
source .gpu/setup.sh >> "$OUT/log.txt" 2>&1 || { log "setup.sh failed"; tail -20 "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/log.txt" 2>&1
SHORT="--config pr-thread --processes $PAIRS --rounds 1 --trials 2 --iters 30 --warmup 10"
AA="--base-python python3 --head-python python3 --no-counters"

summary() { python3 results/evidence/h200-onetime/gpu_onetime_summary.py "$OUT" > "$OUT/summary.md" 2>> "$OUT/log.txt"; }
trap 'log "interrupted: summary of what ran"; summary; cat "$OUT/summary.md"; exit 130' INT TERM

# Each job's coordinator is confined to its own cores (taskset): its measuring core and the spare cores its
# next pairs set up on, so that one job's set-ups and compiles do not land on another's measuring core.
PIN="taskset -c"; command -v taskset > /dev/null || { PIN=""; log "no taskset: jobs share every core"; }

# job NAME CORES CORE MIN_S MAX_RUNS args...: A/A compares one after another while at least MIN_S s remain
job() {
  local name=$1 cores=$2 core=$3 min_s=$4 max_runs=$5; shift 5
  local n=0 dir="$OUT/$name"; mkdir -p "$dir"
  while [ $n -lt $max_runs ]; do
    local left=$(( LIMIT - ($(date +%s) - T0) ))
    if [ $left -lt $min_s ]; then log "$name: $n runs; $left s left, under the $min_s s a run needs"; break; fi
    local t=$(date +%s)
    log "$name run $n: compare $* --core $core on cores $cores (at most $left s)"
    # SIGINT at the deadline: teperf writes what it measured (status interrupted) and summarizes it
    timeout --signal=INT --kill-after=30 $left ${PIN:+$PIN $cores} python3 -m teperf compare $SHORT --core $core $AA "$@" \
      --format json --results-dir "$dir/$n" > "$dir/$n.json" 2> "$dir/$n.err"
    local rc=$?
    log "$name run $n: rc=$rc wall=$(( $(date +%s) - t )) s"
    n=$(( n + 1 ))
    # 2: refused before measuring (a usage or set-up error): again would only repeat it
    if [ $rc -eq 2 ]; then log "$name: stopped: $(tail -1 "$dir/$(( n - 1 )).err")"; break; fi
  done
}
job eager-1 2-4 3 150 20 --modes eager,cuda-graph &
job eager-2 5-7 6 150 20 --modes eager,cuda-graph &
job compile-1 8-10 9 300 3 --modes compile &
job compile-2 11-13 12 300 3 --modes compile &
job warm 0-1,14-15 15 200 1 --modes compile --compile-cache warm &
wait
trap - INT TERM
summary
log "total"
cat "$OUT/summary.md"
