"""Per kept compare of a --keep folder: MLP (and the A/A cells) estimate, interval, load bound, verdict, truth.
    .venv/bin/python results/evidence/cpu-calibration/busy-1205b/cells.py KEEP_FOLDER"""
import json, sys
from pathlib import Path
from teperf.summary import stats_from_meta
from teperf.summary.aggregate import aggregate
from teperf.summary.parse import parse
for out in sorted(Path(sys.argv[1]).glob("*/r*-*-*-*"), key=lambda p: (p.name.split("-")[1:], int(p.name.split("-")[0][1:]))):
    b = sorted(d for d in out.iterdir() if d.is_dir())[-1]
    p = parse(b)
    rows, _ = aggregate(p, stats_from_meta(p.meta))
    truth = json.loads((out / "truth.json").read_text())["per step"] if (out / "truth.json").exists() else None
    for r in rows:
        if r.module != "MLP" and not out.name.endswith("-0"):
            continue
        v = r.verdict + (" (load)" if r.verdict_cause == "load" else "")
        lb = r.load_bound_pct
        print(f"{out.name:24s} {r.module:16s} {r.delta_us:+7.1f} us [{r.ci_low_us:+7.1f}, {r.ci_high_us:+7.1f}] "
              f"contended {r.contended_pct or 0:3.0f}% bound {'-' if lb is None else f'{lb:.2f}%':>6s} {v:20s}"
              + (f" truth {truth:+.1f} us" if truth and r.module == 'MLP' else ""))
