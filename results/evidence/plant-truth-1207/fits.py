"""The fits quoted in README.md and docs/statistics.md, from run1..run3's results.json (the thread plant's
teperf estimates from run1 and run3, the arith plant's from run2; each against the truth of its own run).

    PYTHONPATH=. .venv/bin/python results/evidence/plant-truth-1207/fits.py
"""

import json
import lzma
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "benchmarks"))
import plant_truth as p  # noqa: E402

runs = {n: json.loads(lzma.open(HERE / n / "results.json.xz", "rt").read()) for n in ("run1", "run2", "run3")
        if (HERE / n / "results.json.xz").exists()}


def show(name, x, y):
    f = p.fit_line(x, y)
    print(f"{name}: slope {f['slope']:.3f} +- {f['slope_hw']:.3f}, intercept {f['intercept']:+.1f} "
          f"+- {f['intercept_hw']:.1f} us (n={f['n']})")


# (kind, us) -> (truth of the same run, teperf row)
pairs = {}
for name, d in runs.items():
    truth = {(r["kind"], r["us"]): r for r in d["truth"]}
    for r in d["teperf"]:
        if (r["kind"], r["us"]) in truth:
            pairs[(r["kind"], r["us"])] = (truth[(r["kind"], r["us"])], r, name)
for key in sorted(pairs):
    t, m, name = pairs[key]
    print(f"{key[0]:6} {key[1]:5g} us ({name}): truth {t['truth_us']:+7.1f} +- {t['truth_hw_us']:5.1f}, teperf "
          f"{m['delta_us']:+7.1f} [{m['ci_low_us']:+7.1f}, {m['ci_high_us']:+7.1f}], base {t['base_us']:.0f} / "
          f"{m['base_us']:.0f} us; relative to base: truth {t['truth_us'] / t['base_us']:.3f}, teperf "
          f"{m['delta_us'] / m['base_us']:.3f}")
print()
print("| plant | nominal us | truth us (+-95 %) | the plant's own / the rest us | teperf us [95 %] | teperf / truth "
      "| base us/step truth, teperf | run |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for key in sorted(pairs):
    t, m, name = pairs[key]
    split = f"{t['own_us']:.1f} / {t['truth_us'] - t['own_us']:+.1f}" if t.get("own_us") is not None else "-"
    print(f"| {key[0]} | {key[1]:g} | {t['truth_us']:+.1f} +- {t['truth_hw_us']:.1f} | {split} "
          f"| {m['delta_us']:+.1f} [{m['ci_low_us']:+.1f}, {m['ci_high_us']:+.1f}] "
          f"| {m['delta_us'] / t['truth_us']:.2f} | {t['base_us']:.0f}, {m['base_us']:.0f} | {name} |")
print()
for kind in ("thread", "arith"):
    for lo in (0, 50):
        pts = [(us, t["truth_us"], m["delta_us"]) for (k, us), (t, m, _) in sorted(pairs.items())
               if k == kind and us >= lo]
        if len(pts) < 3:
            continue
        show(f"{kind} teperf ~ nominal, {lo}-200 us", [a for a, _, _ in pts], [c for *_, c in pts])
        show(f"{kind} truth  ~ nominal, {lo}-200 us", [a for a, _, _ in pts], [b for _, b, _ in pts])
        show(f"{kind} teperf ~ truth,   {lo}-200 us", [b for _, b, _ in pts], [c for *_, c in pts])
pooled = [(t["truth_us"], m["delta_us"]) for t, m, _ in pairs.values()]
show("all    teperf ~ truth", [a for a, _ in pooled], [b for _, b in pooled])
truths = [r for d in runs.values() for r in d["truth"]]
for kind in ("thread", "perf", "arith"):
    pts = [(r["us"], r["truth_us"]) for r in truths if r["kind"] == kind and r["us"] >= 50]
    show(f"{kind} truth ~ nominal, 50-200 us, every run", [a for a, _ in pts], [b for _, b in pts])
    own = [r for r in truths if r["kind"] == kind and r.get("own_us") is not None]
    if len(own) >= 3:
        show(f"{kind} the plant's own CPU ~ nominal", [r["us"] for r in own], [r["own_us"] for r in own])
        show(f"{kind} the rest of the step ~ nominal", [r["us"] for r in own],
             [r["truth_us"] - r["own_us"] for r in own])
        show(f"{kind} the rest of the step ~ the step's added wall time", [r["wall_us"] for r in own],
             [r["truth_us"] - r["own_us"] for r in own])
