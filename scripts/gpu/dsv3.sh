#!/bin/bash
# Issue 58's device run, one call under 9 minutes (carry [".gpu"]):
#   source .gpu/setup.sh && OUT=$OUT bash scripts/gpu/dsv3.sh [cells|depth|all]
#   cells  --config dsv3 as shipped, eager and cuda-graph, every recipe (the GPU's missing ones skip with TE's
#          reason), with --counters: per-step host time, kernels, Python calls, host syncs (about 3 minutes)
#   depth  compile, bf16 and fp8 current, DSv3Layer and the dense TransformerLayer at 1, 2 and 4 layers,
#          one run (fresh processes) a point: first compile, recompile, switch back, and compile time
#          against depth (about 6 minutes; DEPTH_RECIPES=bf16 halves it)
# Each run's table and stderr are <name>.md and <name>.err in $OUT/tables.tgz; the one-time figures over the pairs (switch
# back included) and the depth fit in $OUT/summary.md; the bundles in $OUT/dsv3-bundles.tgz; the TE release
# setup.sh installed, and which DSv3 parts it has, in $OUT/te.txt. PAIRS=N (default 1) runs N process pairs
# per run, LANES=N (default PAIRS) of them at once on their own cores: one-time intervals need 6 or more.
# CELLS_S, GRAPH_S, DEPTH_S: each run's limit in seconds; DEADLINE (default 560): the whole step's, after
# which no run starts and the summary is still written; DEPTH_RECIPES: the depth runs' recipes; DEPTH_MODULES
# and DEPTHS (default "TransformerLayer DSv3Layer", "1 2 4"): which depth points run, e.g. the ones a call
# before did not reach (benchmarks/dsv3_onetime.py fits the bundles of both calls together).
set -u
STEP=${1:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
HERE=$PWD; PY=${PYTHON:-python3}; R=/tmp/teperf-dsv3; PAIRS=${PAIRS:-1}; LANES=${LANES:-$PAIRS}
END=$(( $(date +%s) + ${DEADLINE:-560} ))
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
SCHED=(--schedule fixed --processes "$PAIRS" --lanes "$LANES" --rounds 1 --trials 2 --iters 20 --warmup 3)
run() {  # name limit_s -- teperf run args...
  local name=$1 limit=$2 t0; shift 3
  t0=$(date +%s)
  (( limit > END - t0 - 25 )) && limit=$(( END - t0 - 25 ))  # leave the summary its time
  if (( limit < 20 )); then echo "== $name: not run, the step's DEADLINE is reached"; return; fi
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
  # one run a point: compile cases sharing a worker are not independent (on an H100, TransformerLayer bf16
  # read 6.1/4.1/4.1 s at 1/2/4 layers in that order and 4.5/5.6/7.4 s in the order 4/2/1); the dense
  # layer first, so that a call cut off by its limit has kept the comparison
  for module in ${DEPTH_MODULES:-TransformerLayer DSv3Layer}; do
    for n in ${DEPTHS:-1 2 4}; do
      cfg="$R/depth-$module-$n.toml"
      $PY - "$module" "$n" > "$cfg" <<'PYCFG'  # dsv3's module at this depth, named as --sweep names it
import json, sys, tomllib
from pathlib import Path
module, n = sys.argv[1], int(sys.argv[2])
config = tomllib.loads(Path("teperf/configs/dsv3.toml").read_text())
kwargs = {**config["modules"][module].get("kwargs", {}), "layers": n}
print(f"backend = 'te'\ndevice = 'cuda'\nshapes = {json.dumps(config['shapes'])}")
print(f'[modules."{module}[layers={n}]"]')
print("kwargs = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in kwargs.items()) + " }")
PYCFG
      run "depth-$module-$n" ${DEPTH_S:-90} -- --config "$cfg" --modes compile \
        --recipes "${DEPTH_RECIPES:-bf16,fp8_current}" --counters "${SCHED[@]}"
    done
  done ;;
esac
$PY benchmarks/dsv3_onetime.py "$R" > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
tar czf "$OUT/dsv3-bundles.tgz" -C "$R" .
# the device returns at most 8 files: each run's table and stderr travel in one archive
( cd "$OUT" && tables=$(ls ./*.md ./*.err 2>/dev/null | grep -v summary.md) && tar czf tables.tgz $tables && rm -f $tables )
