#!/bin/bash
# --spawn forkserver on the H200 (issue 23), TE 2.16.0 from .gpu/ (.gpu/setup.sh: yours, sourced here, puts torch and TE 2.16.0 on the path).
#   speed: the PR thread's cells plus Linear, base = the installed TE's .py files, head = + 50 us in
#          LayerNormLinear.forward (git overlay): LayerNormLinear is the planted change, Linear and
#          LayerNormMLP are A/A. --lanes 4 --precision 0.5 --budget $BUDGET, once with forkserver,
#          once fresh: pairs per minute, half-widths, the planted delta, the budget's overrun. (~7 min)
#   aa:    A/A (the same interpreter twice) over nightly's eager and cuda-graph cells the GPU has,
#          forkserver, 4 lanes, 8 pairs: false changes over every cell. (~5 min)
#     OUT=/tmp/out bash results/evidence/h200-spawn/gpu_spawn.sh speed|aa
set -u
MODE=${1:-speed}
BUDGET=${BUDGET:-150s}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
export TEPERF_CACHE=/tmp/teperf-spawn-cache
R=results/evidence/h200-spawn
mkdir -p "$R"
summarize() {  # bundle label -> one line of figures
  python3 - "$1" "$2" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
from teperf.api import summarize
s = summarize(sys.argv[1])
rows = [r.to_dict() for r in s.rows]
recs = [json.loads(l) for l in open(f"{sys.argv[1]}/records.jsonl")]
stop = next((r for r in recs if r["kind"] == "stop"), {})
pairs = sum(1 for r in recs if r["kind"] == "pair")
servers = [r for r in recs if r["kind"] == "server"]
starts = sorted(r["start_s"] for r in recs if r["kind"] == "pair")
el = stop.get("elapsed_s") or 0
hw = sorted(round(50 * (r["ci_high_us"] - r["ci_low_us"]) / r["base_us"], 2) for r in rows if r.get("ci_low_us") is not None)
cells = "; ".join(f"{r['module']}/{r['recipe']} {r['delta_pct']:+.2f}% {r['verdict']}" for r in rows if r.get("delta_pct") is not None)
false = sum(r["verdict"] in ("slower", "faster") for r in rows if r["module"] != "LayerNormLinear" or "aa" in sys.argv[2])
print(f"{sys.argv[2]}: {pairs} pairs in {el:.0f} s measuring ({60 * pairs / max(el, 1):.1f}/min; budget {stop.get('budget_s')} s, "
      f"over by {100 * (el / stop['budget_s'] - 1) if stop.get('budget_s') else float('nan'):+.1f}%); half-widths {hw}; "
      f"pair start median {starts[len(starts) // 2] if starts else None} s; servers {len([x for x in servers if x['event'] == 'started'])}, "
      f"died {len([x for x in servers if x['event'] == 'died'])}; false changes {false}; {cells}")
PY
}
if [ "$MODE" = speed ]; then
  REPO=/tmp/te-spawn-repo
  rm -rf "$REPO"; mkdir -p "$REPO"
  TE_DIR=$(python3 -c "import importlib.util as u; print(list(u.find_spec('transformer_engine').submodule_search_locations)[0])")
  (cd "$(dirname "$TE_DIR")" && find transformer_engine -name '*.py' ! -path '*__pycache__*' -print0 | tar --null -T - -cf -) \
    | tar -C "$REPO" -xf -
  G="git -C $REPO -c user.name=teperf -c user.email=teperf@invalid"
  $G init -q -b main && $G add -A && $G commit -qm "base: installed transformer_engine"
  python3 scripts/gpu/te_plants.py "$REPO" lnl-forward >> "$OUT/log.txt" 2>&1
  $G commit -qam "head: LayerNormLinear.forward busy-waits 50 us"
  for spawn in ${SPAWNS:-forkserver fresh}; do
    t=$(date +%s)
    python3 -m teperf compare main~1..main --repo "$REPO" --strategy overlay --config pr-thread \
      --modules Linear,LayerNormLinear,LayerNormMLP --rounds 2 --trials 6 --iters 50 --warmup 50 \
      --lanes 4 --precision 0.5 --budget "$BUDGET" --spawn $spawn --format markdown --results-dir "$R/speed-$spawn" \
      > "$OUT/speed-$spawn.md" 2>> "$OUT/log.txt"
    echo "speed $spawn: rc=$? wall $(( $(date +%s) - t )) s from the command to its end" | tee -a "$OUT/summary.txt"
    summarize "$(ls -d "$R/speed-$spawn"/*/ | tail -1)" "speed-$spawn"
  done
else
  t=$(date +%s)
  python3 -m teperf compare --base-python python3 --head-python python3 --config nightly --modes eager,cuda-graph \
    --processes ${AA_PAIRS:-8} --rounds 2 --trials 4 --iters 30 --warmup 20 --lanes 4 --spawn forkserver \
    --format markdown --results-dir "$R/aa-forkserver" > "$OUT/aa-forkserver.md" 2>> "$OUT/log.txt"
  echo "aa forkserver: rc=$? wall $(( $(date +%s) - t )) s" | tee -a "$OUT/summary.txt"
  summarize "$(ls -d "$R/aa-forkserver"/*/ | tail -1)" "aa-forkserver"
fi
tar czf "$OUT/spawn-$MODE.tgz" "$R"
echo "total $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
