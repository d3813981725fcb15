#!/bin/bash
# Every eager, CUDA-graph and torch.compile cell of the nightly config on the H200 (issue 13, item 9:
# compiled MultiheadAttention/TransformerLayer failed with InternalTorchDynamoError when they shared
# a worker with other compiled cases). One side (`teperf run`), one worker holding all cells, a short
# schedule: the point is that every cell the GPU supports measures, not the precision.
#     source .gpu/setup.sh is done here; run from the repo root:  OUT=/tmp/out bash results/evidence/h200-nightly-all/gpu_nightly_all.sh
# Writes $OUT/log.txt (progress, exit status, cells by mode and status, every failure),
# $OUT/nightly.json and $OUT/nightly.md (the table), $OUT/nightly-bundle.tgz (the bundle).
# Expect: exit 0, every cell ok or skipped (mxfp8/nvfp4 need Blackwell: skipped with TE's reason),
# no "compiled inside the timed loop" note. A SIGTERM at the time limit still leaves a bundle
# (status interrupted, exit 143) with what was measured.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
source .gpu/setup.sh > "$OUT/log.txt" 2>&1 || { cat "$OUT/log.txt"; exit 1; }
export PYTHONPATH=$PWD:$PYTHONPATH
RES="$OUT/results"
{
  echo "setup.sh: $(( $(date +%s) - T0 )) s"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
  python3 -c "import torch, transformer_engine as te; print('torch', torch.__version__, 'TE', te.__version__)"
} >> "$OUT/log.txt" 2>&1
t=$(date +%s)
timeout --signal=TERM 450 python3 -m teperf run --config nightly --core 7 --processes 1 --rounds 1 --trials 2 \
  --iters 20 --warmup 5 --timeout 300 --format json --results-dir "$RES" > "$OUT/nightly.json" 2> "$OUT/nightly.err"
rc=$?
echo "teperf run --config nightly: rc=$rc wall=$(( $(date +%s) - t )) s" >> "$OUT/log.txt"
tail -5 "$OUT/nightly.err" >> "$OUT/log.txt"
B=$(ls -d "$RES"/* 2>/dev/null | head -1)
if [ -n "$B" ]; then
  python3 -m teperf report "$B" --format markdown > "$OUT/nightly.md" 2>> "$OUT/log.txt"
  python3 - "$OUT/nightly.json" >> "$OUT/log.txt" 2>&1 <<'PY'
import collections, json, sys
try:
    data = json.load(open(sys.argv[1]))
except ValueError as exc:
    sys.exit(f"no json table: {exc}")
rows = data["rows"]
print("run status:", data["meta"].get("status"))
by = collections.Counter((r["mode"], r["status"]) for r in rows)
for (mode, status), n in sorted(by.items()):
    print(f"  {mode:10s} {status:8s} {n}")
for r in rows:
    if r["status"] not in ("ok", "skipped"):
        print(f"  NOT OK {r['module']}/{r['recipe']}/{r['mode']}: {r['status']}: {(r.get('error') or '')[:300]}")
print("notes:", *data["notes"], sep="\n  ")
PY
  tar czf "$OUT/nightly-bundle.tgz" -C "$RES" "$(basename "$B")"
fi
echo "total: $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"
