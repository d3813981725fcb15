"""Issue 55, offline: would another per-pair estimator of the couples' log ratios narrow the GPU intervals?

Reads this set's bundles (the .tar.xz files), and per cell prints the mean over pairs and the t half-width at
98.8 % of four per-pair estimators: the median (teperf's), the mean, the 20 % trimmed mean and Hodges-Lehmann.
Each couple's last attempt counts. From the repository root:
    python results/evidence/gpu-plan-1207/estimators.py
"""

import glob
import math
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import special, stats

sys.path.insert(0, ".")
from teperf.summary.parse import parse  # noqa: E402

LEVEL = 0.988
HERE = Path(__file__).parent


def hodges_lehmann(x):
    x = np.asarray(x)
    walsh = (x[:, None] + x[None, :]) / 2
    return float(np.median(walsh[np.triu_indices(len(x))]))


ESTIMATORS = {
    "median": np.median,
    "mean": np.mean,
    "trim20": lambda x: stats.trim_mean(x, 0.2),
    "HL": hodges_lehmann,
}

with tempfile.TemporaryDirectory() as tmp:
    for archive in sorted(HERE.glob("**/*bundles.tar.xz")):
        with tarfile.open(archive) as tar:
            tar.extractall(Path(tmp) / archive.parent.name, filter="data")
    for path in sorted(p.rsplit("/", 1)[0] for p in glob.glob(f"{tmp}/*/*/*/records.jsonl")):
        bundle = parse(path)
        print(path[len(tmp) + 1 :])
        for cid, cell in bundle.cells.items():
            last = defaultdict(dict)  # (pair, round, trial) -> side -> (attempt, us)
            for t in cell.trials:
                v = t.per_step_us("process_cpu_ns")
                if v is not None and t.attempt >= last[(t.pair, t.round, t.trial)].get(t.side, (-1,))[0]:
                    last[(t.pair, t.round, t.trial)][t.side] = (t.attempt, v)
            per_pair = defaultdict(list)
            for (pair, _, _), s in last.items():
                if {"base", "head"} <= s.keys() and s["base"][0] == s["head"][0]:
                    per_pair[pair].append(math.log(s["head"][1] / s["base"][1]))
            pairs = [v for v in per_pair.values() if len(v) >= 4]
            if len(pairs) < 3:
                continue
            cols = []
            for name, f in ESTIMATORS.items():
                u = np.array([f(v) for v in pairs])
                half = special.stdtrit(len(u) - 1, 1 - (1 - LEVEL) / 2) * u.std(ddof=1) / math.sqrt(len(u))
                cols.append(f"{name} {100 * math.expm1(u.mean()):+.2f}% +-{100 * half:.2f}")
            print(f"  cell {cid}: {len(pairs)} pairs  " + " | ".join(cols))
