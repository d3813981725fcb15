#!/bin/bash
# H200 evidence for one-time costs (issues 17, 22), one device call of at most 10 minutes (PAIRS=3: 5-8).
# On the GPU machine, from the repo root, with .gpu/ carried (TE 2.20.2 or 2.16.0):
#     OUT=/tmp/out bash scripts/gpu_onetime.sh
# Writes everything under $OUT: log.txt (setup, exit status and wall time per job, every one-time
# record per pair and side), tables.md (the three markdown outputs), onetime/<job>/<bundle>/ (the
# bundles, to copy into results/evidence/h200-onetime/) and onetime-bundles.tgz (the same, packed).
# The PR thread's cells (config pr-thread: LayerNormLinear/LayerNormMLP x bf16/fp8 delayed,
# [8,2,256]) under eager, cuda-graph and compile, with TE on both sides (A/A):
#   aa-cold   core 7:  compare, cold inductor cache (default): first call, recompile, per step
#   run       core 11: teperf run (one side): per-step time by mode, one-time cost, break-even vs eager
#   aa-warm   core 7:  compare --modes compile --compile-cache warm: the cached path (after aa-cold)
# What to look for: every cell has a "first call" line in the "one-time costs" table; compile rows
# have a recompile line (TE's forwards run outside dynamo, so the footer may say "graphs compiled
# by it: 0"); A/A one-time verdicts "no change" or "inconclusive" (PAIRS=6 by default: issue 22's
# --min-effect-once 10 and 5-pair minimum want the A/A spread, the "between pairs"/pair_sd_pct of
# each one-time row, over 6 pairs), never slower/faster; aa-warm's footer "N of M compile first
# calls found every graph they compiled in it" (and which missed, bypassed a cache or compiled
# nothing; per record: first_call.cache.fxgraph_*/autograd_*) and first calls against aa-cold's;
# the run's break-even column (steps, or "never" where a mode is not faster per step);
# rc=0 for each job (1 means a cell failed or ended partial: the table's error column says why).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH
R="$OUT/onetime"
mkdir -p "$R"
TP="python3 -m teperf"
PAIRS=${PAIRS:-6}
SHORT="--config pr-thread --processes $PAIRS --rounds 1 --trials 2 --iters 50 --warmup 10"
AA="--base-python python3 --head-python python3 --no-counters"
{ echo "setup.sh: $(( $(date +%s) - T0 )) s"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$OUT/log.txt" 2>&1

job() {  # name timeout args...
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout --signal=INT $lim $TP "$@" --format markdown --results-dir "$R/$name" > "$OUT/$name.md" 2> "$OUT/$name.err"
  echo "$name: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
}
(job aa-cold 300 compare $SHORT --modes eager,cuda-graph,compile --core 7 $AA
 job aa-warm 200 compare $SHORT --modes compile --compile-cache warm --core 7 $AA) &
(job run 300 run $SHORT --modes eager,cuda-graph,compile --core 11) &
wait
for f in aa-cold run aa-warm; do
  { echo; echo "## $f"; echo; cat "$OUT/$f.md"; echo; tail -3 "$OUT/$f.err"; } >> "$OUT/tables.md"
done
# the one-time records themselves, per pair and side, for a quick look without untarring
for b in "$R"/*/*/; do
  python3 - "$b" >> "$OUT/log.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
b = Path(sys.argv[1]); cases = {c["id"]: c for c in json.loads((b / "meta.json").read_text())["cases"]}
print("#", b)
for line in (b / "records.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r["kind"] in ("setup", "prewarm") and r.get("info"):
        c, i = cases[r["case_id"]], r["info"]
        f = lambda k: "-" if not isinstance(i.get(k), dict) else "%.1f ms cpu (+%.1f children) %.1f ms wall on %s" % (
            i[k]["process_cpu_ns"] / 1e6, i[k]["children_cpu_ns"] / 1e6, i[k]["wall_ns"] / 1e6, i[k]["cores"])
        print(r["kind"], r.get("pair"), r["side"], c["module"], c["recipe"], c["mode"], "| first:", f("first_call"),
              "| recompile:", f("recompile"), i.get("recompile", {}).get("graphs", ""), "| graphs:", i.get("graphs", ""),
              "| cache:", {k: v for k, v in ((i.get("first_call") or {}).get("cache") or {}).items() if k != "dir"})
PY
done
tar czf "$OUT/onetime-bundles.tgz" -C "$OUT" onetime
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt" | tail -60
