"""The thread plant's extra CPU (measured - nominal) against the off-CPU time it adds to a step (wall delta -
CPU delta), truth and teperf alike: truths from runN/results.json (less 6 us for --measure-plant's clock
calls in run2/run3; run1's 12 us burst left out), teperf's from the bundles in bundles.tar.xz.

    .venv/bin/python results/evidence/plant-truth-1207/offcpu.py > results/evidence/plant-truth-1207/offcpu.txt
"""

import json
import lzma
import statistics as st
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "benchmarks"))
import plant_truth as p  # noqa: E402

MEASURING_US = 6.0  # the 0 us perf plant's own CPU under --measure-plant: its two thread-clock calls

pts = []
with tempfile.TemporaryDirectory() as tmp:
    with tarfile.open(HERE / "bundles.tar.xz") as tar:
        tar.extractall(tmp)
    for f in sorted(Path(tmp).glob("run*/compares/thread-*/results/*/records.jsonl")):
        d = {}
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("kind") == "trial":
                per = (r["process_cpu_ns"] / r["iters"] / 1e3, r["wall_ns"] / r["iters"] / 1e3)
                d.setdefault((r["pair"], r["side"]), []).append(per)
        pairs = sorted({q for q, _ in d})

        def delta(i):
            return st.fmean(st.fmean(x[i] for x in d[(q, "head")]) - st.fmean(x[i] for x in d[(q, "base")])
                            for q in pairs)

        rel = f.relative_to(tmp).parts
        pts.append(("teperf", rel[0], float(rel[2].split("-")[1]), delta(0), delta(1)))
for n in ("run1", "run2", "run3"):
    for r in json.loads(lzma.open(HERE / n / "results.json.xz", "rt").read())["truth"]:
        if r["kind"] == "thread" and not (n == "run1" and r["us"] == 12):
            meas = 0.0 if r.get("own_us") is None else MEASURING_US
            pts.append(("truth", n, r["us"], r["truth_us"] - meas, r["wall_us"]))
for s, n, us, c, w in sorted(pts):
    print(f"{s:6} {n} {us:5g} us: cpu {c:+7.1f}, wall {w:+7.1f}, extra {c - us:+6.1f}, added off-CPU {w - c:+7.1f} us")
for name, q in (("truth + teperf", pts), ("truth", [t for t in pts if t[0] == "truth"]),
                ("teperf", [t for t in pts if t[0] == "teperf"])):
    f = p.fit_line([w - c for *_, c, w in q], [c - us for _, _, us, c, _ in q])
    print(f"{name}: extra = {f['intercept']:+.1f} +- {f['intercept_hw']:.1f} us + {f['slope']:.3f} +- "
          f"{f['slope_hw']:.3f} x added off-CPU time (n={f['n']})")
