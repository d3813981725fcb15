"""A proposal's check (issue 56): per compare, the change at zero off-CPU time. Least squares over its trials of
per-step CPU time on a fixed effect per pair, a head dummy and the trial's off-CPU time per step (wall - CPU):
the head dummy is what the change costs on an idle core, beta what one us of preemption adds to the CPU clock.
Intervals are naive (+-1.96 se, trials taken as independent given the pair). Then the idle-core deltas'
line against the nominal size.

    .venv/bin/python results/evidence/plant-truth-1207/idlecore.py > results/evidence/plant-truth-1207/idlecore.txt
"""

import json
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "benchmarks"))
import plant_truth as p  # noqa: E402

points = {}
with tempfile.TemporaryDirectory() as tmp:
    with tarfile.open(HERE / "bundles.tar.xz") as tar:
        tar.extractall(tmp)
    for f in sorted(Path(tmp).glob("run*/compares/*/results/*/records.jsonl")):
        rows = []
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("kind") == "trial":
                cpu, wall = r["process_cpu_ns"] / r["iters"] / 1e3, r["wall_ns"] / r["iters"] / 1e3
                rows.append((r["pair"], r["side"] == "head", cpu, wall - cpu))
        pairs = sorted({q for q, *_ in rows})
        x = np.array([[float(q == k) for k in pairs] + [float(h), off] for q, h, _, off in rows])
        y = np.array([c for *_, c, _ in rows])
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        resid = y - x @ coef
        cov = resid @ resid / (len(y) - x.shape[1]) * np.linalg.inv(x.T @ x)
        rel = f.relative_to(tmp).parts
        kind, us = rel[2].split("-")
        plain = np.mean([c for _, h, c, _ in rows if h]) - np.mean([c for _, h, c, _ in rows if not h])
        print(f"{rel[0]} {kind:6} {float(us):5g} us: plain mean difference {plain:+7.1f}, idle-core delta "
              f"{coef[-2]:+7.1f} +- {1.96 * np.sqrt(cov[-2, -2]):5.1f} us, beta {coef[-1]:.3f} +- "
              f"{1.96 * np.sqrt(cov[-1, -1]):.3f} us of CPU per us off-CPU")
        points.setdefault(kind, []).append((float(us), float(coef[-2])))
for kind, pts in points.items():
    f = p.fit_line([a for a, _ in pts], [b for _, b in pts])
    print(f"{kind}: idle-core delta = {f['intercept']:+.1f} +- {f['intercept_hw']:.1f} us + {f['slope']:.3f} +- "
          f"{f['slope_hw']:.3f} x nominal (n={f['n']})")
