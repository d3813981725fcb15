#!/bin/bash
# H200 evidence for the counters gate and the compile residue (issue 26); NOT RUN YET.
# On the GPU machine, from the repo root, with .gpu/ carried (TE 2.20.2 or 2.16.0):
#     OUT=/tmp/out bash scripts/gpu_counters.sh [gate|model|sweep|all]   (default all; about 10-14 minutes:
#     run the parts in separate device calls when one call may last 10 minutes at most)
# Writes under $OUT: log.txt (exit status and wall time per job), the expected files it made
# (te-eager.toml: every eager + cuda-graph cell of config nightly; te-compile.toml: every compile
# cell; pr-thread.toml) with their .calls.json, the text of each check (*.txt), and for the
# model-sized cell model.md (teperf run --config te-model: per-step, one-time table with the first
# call and the recompile) and model-counters.txt (its graphs, graph breaks, recompiles, guard failures).
#   gate:  per config, `counters check --update` (makes the file) and then two plain checks in fresh
#          workers: how long the whole check takes, and whether every counter repeats (rc=0, "as expected").
#          A row that changes between the checks is a counter that is not repeatable on the GPU:
#          note which, and give it a tolerance in the file.
#   model: the stack of 4 TransformerLayers [128,2,1024], bf16/fp8 delayed, eager and compile.
#   sweep: GroupedLinear host time against num_gemms 1,2,4,8,16, bf16 and fp8 delayed ([128,4,256]: 512 tokens,
#          32 per GEMM at 16; 3, 6, 12 break the split rule): sweep.txt has per value the us per step and Python calls, and the slope.
# What to look for: "update" lines rc=0; "check" lines rc=0 with "N cells as expected" (a rc=1 with
# changed rows = a counter that wobbles: the .txt says which); the wall time of each check (for the
# README); in te-compile.toml the graphs/graph_breaks of each compile cell (LayerNormLinear: graphs 0,
# it runs eagerly; LayerNormMLP bf16: 2 graphs), the break reasons in te-compile-update.txt.
set -u
WHAT=${1:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH
TP="python3 -m teperf"
{ echo "setup.sh: $(( $(date +%s) - T0 )) s"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$OUT/log.txt" 2>&1

job() {  # name timeout args...
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout --signal=INT $lim $TP "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
}

gate() {  # name timeout config args...
  local name=$1 lim=$2; shift 2
  job "$name-update" $lim counters check --expected "$OUT/$name.toml" --update "$@"
  job "$name-check1" $lim counters check --expected "$OUT/$name.toml" "$@"
  job "$name-check2" $lim counters check --expected "$OUT/$name.toml" --seed 7 "$@"
}

if [ "$WHAT" = gate ] || [ "$WHAT" = all ]; then
  # two cores: the eager/cuda-graph cells and the compile cells at once (each worker pins its own core)
  (gate pr-thread 200 --config pr-thread --core 3
   gate te-eager 400 --config nightly --modes eager,cuda-graph --core 3) &
  (gate te-compile 500 --config nightly --modes compile --core 11) &
  wait
fi
if [ "$WHAT" = model ] || [ "$WHAT" = all ]; then
  t=$(date +%s)
  timeout --signal=INT 500 $TP run --config te-model --counters --core 7 --format markdown \
      --results-dir "$OUT/model" > "$OUT/model.md" 2> "$OUT/model.err"
  echo "model: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
  for b in "$OUT"/model/*/; do
    python3 - "$b" > "$OUT/model-counters.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
b = Path(sys.argv[1]); cases = {c["id"]: c for c in json.loads((b / "meta.json").read_text())["cases"]}
for line in (b / "records.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r["kind"] == "counters":
        c = cases[r["case_id"]]
        print(c["module"], c["recipe"], c["mode"], "layers", (c.get("kwargs") or {}).get("layers"), r["counters"])
    if r["kind"] == "setup" and r.get("info") and r.get("pair") == 0:
        c, i = cases[r["case_id"]], r["info"]
        ms = lambda k: "-" if not isinstance(i.get(k), dict) else "%.0f ms cpu, %.0f ms wall" % (
            (i[k]["process_cpu_ns"] + i[k].get("children_cpu_ns", 0)) / 1e6, i[k]["wall_ns"] / 1e6)
        print("setup", c["recipe"], c["mode"], "| first call:", ms("first_call"), "| recompile:", ms("recompile"),
              "| graphs", i.get("graphs"), "breaks", i.get("graph_breaks"), i.get("break_reasons"))
PY
  done
  tar czf "$OUT/model-bundle.tgz" -C "$OUT" model
fi
if [ "$WHAT" = sweep ] || [ "$WHAT" = all ]; then
  t=$(date +%s)
  timeout --signal=INT 500 $TP run --config nightly --modules GroupedLinear --recipes bf16,fp8_delayed \
      --modes eager --sweep num_gemms=1,2,4,8,16 --processes 4 --rounds 1 --trials 4 --iters 50 \
      --counters --core 7 --results-dir "$OUT/sweep" > "$OUT/sweep.txt" 2> "$OUT/sweep.err"
  echo "sweep: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
  tar czf "$OUT/sweep-bundle.tgz" -C "$OUT" sweep
fi
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
tail -40 "$OUT/log.txt"
