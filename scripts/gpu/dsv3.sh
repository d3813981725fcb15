#!/bin/bash
# Issue 58's device run, one call under 9 minutes (carry [".gpu"]):
#   source .gpu/setup.sh && OUT=$OUT bash scripts/gpu/dsv3.sh [cells|depth|all]
#   cells  --config dsv3 as shipped, eager and cuda-graph, every recipe (the GPU's missing ones skip with TE's
#          reason), with --counters: per-step host time, kernels, Python calls, host syncs (about 3 minutes)
#   depth  compile, bf16 and fp8 current, DSv3Layer and the dense TransformerLayer at 1, 2 and 4 layers
#          (--sweep layers=1,2,4): first compile, recompile, switch back, and compile time against depth
#          (about 4.5 minutes)
# Each run's table is $OUT/<name>.md, its stderr $OUT/<name>.err; the one-time figures over the pairs (switch
# back included) and the depth fit in $OUT/summary.md; the bundles in $OUT/dsv3-bundles.tgz; the TE release
# setup.sh installed, and which DSv3 parts it has, in $OUT/te.txt. PAIRS=N (default 1) runs N process pairs
# per run: one-time intervals need 6 or more, which takes longer than one call; raise the limits with it.
# CELLS_S, GRAPH_S, DEPTH_S: each run's limit in seconds; DEPTH_RECIPES: the depth run's recipes.
set -u
STEP=${1:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=$PWD; PY=${PYTHON:-python3}; R=/tmp/teperf-dsv3; PAIRS=${PAIRS:-1}
mkdir -p "$R"
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE:${PYTHONPATH:-}"
{ nproc; lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))"; nvidia-smi -L; } > "$OUT/machine.txt" 2>&1
$PY - > "$OUT/te.txt" 2>&1 <<'EOF'
import json
from teperf.worker.backends import te
facts = te.describe()
print("TransformerEngine", facts.get("version"), "at", facts.get("location"))
print(json.dumps({k: facts.get(k) for k in ("dsv3", "recipes", "m_splits", "cudnn", "graph_kwargs")}, indent=1))
EOF
cat "$OUT/te.txt"
SCHED=(--schedule fixed --processes "$PAIRS" --rounds 1 --trials 2 --iters 20 --warmup 3)
run() {  # name limit_s -- teperf run args...
  local name=$1 limit=$2 t0; shift 3
  t0=$(date +%s)
  echo "== $name: teperf run $*"
  # SIGINT: teperf stops, keeps what it measured and writes the table
  timeout --signal=INT --kill-after=20 "$limit" $PY -m teperf run "$@" --format markdown \
    --results-dir "$R/$name" > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t0 )) s"
  cat "$OUT/$name.md"; tail -3 "$OUT/$name.err"
}
case $STEP in cells|all)
  # eager and cuda-graph apart: a failed capture cannot cost the eager cells their process
  run cells ${CELLS_S:-120} -- --config dsv3 --modes eager --counters "${SCHED[@]}"
  run cells-graph ${GRAPH_S:-80} -- --config dsv3 --modes cuda-graph --counters "${SCHED[@]}" ;;
esac
case $STEP in depth|all)
  # the dense layer first: a run cut off by its limit has kept the comparison
  run depth ${DEPTH_S:-270} -- --config dsv3 --modules TransformerLayer,DSv3Layer --modes compile \
    --recipes "${DEPTH_RECIPES:-bf16,fp8_current}" --sweep layers=1,2,4 --counters "${SCHED[@]}" ;;
esac
$PY benchmarks/dsv3_onetime.py "$R" > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
tar czf "$OUT/dsv3-bundles.tgz" -C "$R" .
