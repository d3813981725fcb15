#!/bin/bash
# H200 evidence for the counters gate, the compile residue and the overhead slopes (issue 26); gate and sweep ran on the H200 (results/evidence/h200-counters), gate-all and model not yet.
# On the GPU machine, from the repo root, with .gpu/ carried (TE 2.20.2 or 2.16.0), one part per device call
# (a call may last 10 minutes at most):
#     OUT=/tmp/out bash results/evidence/h200-counters/gpu_counters.sh gate       # about 3-5 min
#     OUT=/tmp/out bash results/evidence/h200-counters/gpu_counters.sh gate-all   # about 5-8 min
#     OUT=/tmp/out bash results/evidence/h200-counters/gpu_counters.sh model      # about 5-9 min
#     OUT=/tmp/out bash results/evidence/h200-counters/gpu_counters.sh sweep      # about 2-4 min
# Writes under $OUT: log.txt (exit status and wall time per job), the expected files it made (*.toml with
# their .calls.json) and the text of each check (*.txt, stderr in *.err).
#   gate:     the PR thread's cells (config pr-thread) eager (core 3) and compile (core 11, at the same
#             time): per file `counters check --update` (makes it), then two plain checks in fresh workers
#             (another hash seed): how long a whole check takes, and whether every counter repeats.
#   gate-all: the same for every eager and cuda-graph cell of config nightly the GPU has (te-all.toml).
#   model:    the stack of 4 TransformerLayers [128,2,1024] (config te-model), bf16/fp8 delayed, eager and
#             compile, with counters: model.md (per-step and one-time tables: first call, recompile) and
#             model-counters.txt (graphs, graph breaks, recompiles, guard failures; first call per pair).
#   sweep:    GroupedLinear host time against num_gemms 1,2,4,8,16, bf16 and fp8 delayed ([128,4,256]: 512
#             tokens, 32 per GEMM at 16; 3, 6, 12 break the split rule): sweep.txt, per value the us per step
#             and Python calls, and the slope with its interval.
# What to look for: "*-update" rc=0; "*-check1/2" rc=0 with "N cells as expected" (rc=1 with changed rows =
# a counter that is not repeatable on the GPU: the .txt names it; give it a tolerance in the file); the
# check's wall time (for the README); in pr-thread-compile.toml each compile row's graphs and graph_breaks
# (LayerNormLinear: graphs 0, it runs eagerly; LayerNormMLP bf16: 2 graphs), the reasons in its -update.txt.
set -u
WHAT=${1:?say which part: gate, gate-all, model or sweep}
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

if [ "$WHAT" = gate ]; then
  (gate pr-thread 150 --config pr-thread --core 3) &
  (gate pr-thread-compile 180 --config pr-thread --modes compile --core 11) &
  wait
fi
if [ "$WHAT" = gate-all ]; then
  gate te-all 180 --config nightly --modes eager,cuda-graph --core 3
fi
if [ "$WHAT" = model ]; then
  t=$(date +%s)
  timeout --signal=INT 560 $TP run --config te-model --counters --core 7 --format markdown \
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
if [ "$WHAT" = sweep ]; then
  t=$(date +%s)
  timeout --signal=INT 500 $TP run --config nightly --modules GroupedLinear --recipes bf16,fp8_delayed \
      --modes eager --sweep num_gemms=1,2,4,8,16 --processes 4 --rounds 1 --trials 4 --iters 50 \
      --counters --core 7 --results-dir "$OUT/sweep" > "$OUT/sweep.txt" 2> "$OUT/sweep.err"
  echo "sweep: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
  tar czf "$OUT/sweep-bundle.tgz" -C "$OUT" sweep
fi
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
tail -40 "$OUT/log.txt"
