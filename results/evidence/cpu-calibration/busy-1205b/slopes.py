"""Each loaded cell of the given bundles: its verdict and load bound under this checkout's rule, the pairs' lost-time
asymmetry and log ratios, and the within-pair slope of the log ratio on the asymmetry (beta, se).
    .venv/bin/python results/evidence/cpu-calibration/busy-1205b/slopes.py BUNDLE [BUNDLE ...]"""
import sys, json, math
import numpy as np
import importlib; agg = importlib.import_module("teperf.summary.aggregate")
from teperf.summary.parse import parse
from teperf.config import Stats
captured = []
orig = agg.load_bound
def spy(evidence, *a):
    captured.append({p: list(c) for p, c in evidence.items()})
    return orig(evidence, *a)
agg.load_bound = spy
for path in sys.argv[1:]:
    parsed = parse(path)
    stats = Stats()
    for case in parsed.cases:
        captured.clear()
        row = agg.cell_row(parsed, case, stats)
        print(path.split('/')[-2] if path.endswith('/') else path, case.module, row['verdict'], row.get('verdict_cause'),
              f"d={row['delta_pct']:.1f}% [{row['ci_low_pct']:.1f},{row['ci_high_pct']:.1f}] bound={row.get('load_bound_pct')} {row.get('load_bound_source')} base={row['base_us']:.0f}")
        if captured:
            ev = captured[0]
            r = np.array([x[0] for c in ev.values() for x in c]); a = np.array([x[1] for c in ev.values() for x in c])
            ap = [float(np.median([x[1] for x in c])) for c in ev.values()]
            rp = [float(np.median([x[0] for x in c])) for c in ev.values()]
            # within-pair regression
            dx = np.concatenate([[x[1] - np.mean([y[1] for y in c]) for x in c] for c in ev.values()])
            dy = np.concatenate([[x[0] - np.mean([y[0] for y in c]) for x in c] for c in ev.values()])
            beta = (dx @ dy) / (dx @ dx); res = dy - beta*dx
            se = math.sqrt(res @ res / (len(dx) - len(ev) - 1) / (dx @ dx))
            print(f"   couples={len(r)} pairs={len(ev)} asym pairs: {np.round(ap,3).tolist()} mean={np.mean(ap):.3f}")
            print(f"   r pairs: {np.round(rp,3).tolist()}  sd couple asym={np.std(a):.3f} corr(r,a)={np.corrcoef(r,a)[0,1]:.2f} beta={beta:.3f} se={se:.3f}")
