#!/bin/bash
# Parallel lanes on the H200 (issue 16): does --lanes N keep teperf calibrated, and how much precision per
# minute does it buy? benchmarks/lanes_calibration.py with --lanes 1, 2, 4, 8, one run each of 75 s
# (--precision 0.1 --budget 75s: the budget decides), on the pr-thread config's TE cells plus Linear: Linear,
# LayerNormLinear, LayerNormMLP x bf16, fp8_delayed at [8,2,256] (pairs of 2 rounds x 6 trials x 50 iters). Base = the installed TE's .py files,
# head = the same plus a 50 us busy-wait in LayerNormLinear.forward (git overlay): the two LayerNormLinear
# cells are the planted change, the four others are A/A.
#     run from the repo root (source .gpu/setup.sh is done here):  bash scripts/gpu/lanes.sh
# Writes $OUT/lanes.md (the summary table), $OUT/bench.txt (every run's line), $OUT/log.txt (topology, timings),
# $OUT/by-lane-*.md (each run's per-lane breakdown) and $OUT/lanes-bundles.tgz (every bundle).
# Takes about 7-8 minutes (4 x (75 s + start and tear-down) + set-up); stopped at 8.7 min at the latest.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH
export TEPERF_CACHE=/tmp/teperf-lanes-cache
{
  echo "setup.sh: $(( $(date +%s) - T0 )) s"
  nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
  echo "cores: $(nproc); thread_siblings_list per cpu:"
  for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do echo -n "$(cat "$f") "; done; echo
  python3 -c "from teperf.cpus import physical_cores; from teperf.cpus import available_cores; \
print('physical cores available:', len(physical_cores(available_cores())))"
} >> "$OUT/log.txt" 2>&1

# The planted repo: base commit = the installed TE's .py files, head commit = + 50 us in LayerNormLinear.forward.
REPO=/tmp/te-lanes-repo
rm -rf "$REPO"; mkdir -p "$REPO"
TE_DIR=$(python3 -c "import importlib.util as u; print(list(u.find_spec('transformer_engine').submodule_search_locations)[0])")
(cd "$(dirname "$TE_DIR")" && find transformer_engine -name '*.py' ! -path '*__pycache__*' -print0 | tar --null -T - -cf -) \
  | tar -C "$REPO" -xf -
G="git -C $REPO -c user.name=teperf -c user.email=teperf@invalid"
$G init -q -b main && $G add -A && $G commit -qm "base: installed transformer_engine"
python3 scripts/gpu/te_plants.py "$REPO" lnl-forward >> "$OUT/log.txt" 2>&1
$G commit -qam "head: LayerNormLinear.forward busy-waits 50 us"
echo "planted repo ready: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"

t=$(date +%s)
timeout --signal=INT $(( 520 - ($(date +%s) - T0) )) python3 benchmarks/lanes_calibration.py \
  --lanes 1,2,4,8 --runs 1 --budget 75s --planted LayerNormLinear --out "$OUT/lanes" -- \
  main~1..main --repo "$REPO" --strategy overlay --config pr-thread --modules Linear,LayerNormLinear,LayerNormMLP \
  --rounds 2 --trials 6 --iters 50 --warmup 50 > "$OUT/bench.txt" 2>&1
echo "benchmark: rc=$? wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
cp "$OUT/lanes/lanes.md" "$OUT/lanes.md" 2>/dev/null
for b in "$OUT"/lanes/lanes*-run*/*/; do
  [ -d "$b" ] || continue
  name=$(basename "$(dirname "$b")")
  python3 -m teperf report "$b" --by-lane --format markdown > "$OUT/by-lane-$name.md" 2>> "$OUT/log.txt"
  python3 -m teperf report "$b" --format markdown > "$OUT/table-$name.md" 2>> "$OUT/log.txt"
done
tar czf "$OUT/lanes-bundles.tgz" -C "$OUT" lanes 2>> "$OUT/log.txt" && rm -rf "$OUT/lanes"
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/bench.txt" "$OUT/log.txt"
