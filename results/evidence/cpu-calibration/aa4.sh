#!/bin/bash
# done-when 1: the demo's base tree on both sides, 4 runs of 6 pairs (the demo schedule)
cd "$(dirname "$0")/../../.."
out=${1:-/tmp/i32/aa4}; mkdir -p $out
uptime
for i in 1 2 3 4; do
  .venv/bin/teperf compare --config demo --base-path examples/planted/base --head-path examples/planted/base \
     --format json --results-dir $out/bundles > $out/run$i.json 2> $out/run$i.err
  .venv/bin/python - $out/run$i.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(f"  {r['module']:16s} step {r['verdict']:14s} {r['delta_pct']:+6.2f}% [{r['ci_low_pct']:+.2f}, {r['ci_high_pct']:+.2f}]"
          f" cont {r.get('contended_pct') or 0:.0f}% | first call {r.get('first_call_verdict')} {r.get('first_call_delta_pct') or 0:+.1f}%"
          f" [{r.get('first_call_ci_low_pct') or 0:+.1f}, {r.get('first_call_ci_high_pct') or 0:+.1f}]")
PY
done
uptime
