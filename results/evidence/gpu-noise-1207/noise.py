"""Issue 55, the couple-noise decomposition: how far apart two adjacent 50-step trials read, per setting.

Reads this set's bundles (the .tar.xz files) and gpu-plan-1207/call10-aa's. Per run and cell it prints, over
every couple of every pair, the robust sd (1.4826 x MAD) of the couple's log ratio ln(head/base) after its
pair's median is taken out (the noise inside a process pair, not between pairs); the same x sqrt(iters / 50)
(flat if the noise is per step and independent, growing with iters if it is per trial); and the robust sd of
the log ratio of one side's two adjacent trials of a round (trial noise inside one process). From the
repository root:
    python results/evidence/gpu-noise-1207/noise.py [process_cpu_ns | thread_cpu_ns | wall_ns]
"""

import glob
import math
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, ".")
from teperf.summary.parse import parse  # noqa: E402

HERE = Path(__file__).parent
METRIC = sys.argv[1] if len(sys.argv) > 1 else "process_cpu_ns"  # or thread_cpu_ns, wall_ns


def robust_sd(x):
    x = np.asarray(x)
    return 1.4826 * float(np.median(np.abs(x - np.median(x)))) if len(x) >= 4 else math.nan


with tempfile.TemporaryDirectory() as tmp:
    # the third A/A run of the README's command (4 lanes, fresh pairs, the auto schedule's 2 x 16 trials)
    for archive in [
        *sorted(HERE.glob("*bundles.tar.xz")),
        HERE / "../gpu-plan-1207/call10-aa/aa-bundles.tar.xz",
    ]:
        with tarfile.open(archive) as tar:
            tar.extractall(Path(tmp) / archive.name.split("-")[0], filter="data")
    print(f"clock: {METRIC}")
    print(
        f"{'run':<8} {'cell':<28} {'iters':>5} {'pairs':>5} {'couples':>7} {'couple sd':>9} "
        f"{'x sqrt(it/50)':>13} {'same-side sd':>12}"
    )
    for path in sorted(p.rsplit("/", 1)[0] for p in glob.glob(f"{tmp}/*/*/*/records.jsonl")):
        bundle = parse(path)
        run = path[len(tmp) + 1 :].split("/")[1]
        iters = bundle.meta.schedule.iters if hasattr(bundle.meta, "schedule") else None
        for cid, cell in bundle.cells.items():
            last = defaultdict(dict)  # (pair, round, trial) -> side -> (attempt, us)
            for t in cell.trials:
                v = t.per_step_us(METRIC)
                if v is not None and t.attempt >= last[(t.pair, t.round, t.trial)].get(t.side, (-1,))[0]:
                    last[(t.pair, t.round, t.trial)][t.side] = (t.attempt, v)
                iters = iters or t.iters
            per_pair = defaultdict(list)
            same = []
            for (pair, rnd, trial), s in sorted(last.items()):
                if {"base", "head"} <= s.keys() and s["base"][0] == s["head"][0]:
                    per_pair[pair].append(math.log(s["head"][1] / s["base"][1]))
                for side in ("base", "head"):
                    nxt = last.get((pair, rnd, trial + 1), {}).get(side)
                    if side in s and nxt:
                        same.append(math.log(nxt[1] / s[side][1]))
            centred = [x - np.median(v) for v in per_pair.values() if len(v) >= 4 for x in v]
            sd = robust_sd(centred)
            scale = math.sqrt(iters / 50) if iters else math.nan
            name = "/".join(str(cid).split("/")[:2])
            print(
                f"{run:<8} {name:<28} {iters or 0:>5} {len(per_pair):>5} {len(centred):>7} "
                f"{sd:>8.2%} {sd * scale:>12.2%} {robust_sd(same):>11.2%}"
            )
