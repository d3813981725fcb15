"""Compare two schedules on the same cells, A/A (the same code on both sides):
interval half-width, spread, wall time, and how often each calls a change
that is not there. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/schedule_quality.py [--repeats 3] [-- extra teperf args]

On a GPU machine pass e.g. `-- --config pr-thread --base-python python3 --head-python python3`.
The figure of merit is half-width x sqrt(wall seconds): lower is better per
second of measuring.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEDULES = {
    "pr-thread (1 pair x 6 x 9 x 300)": [
        "--processes",
        "1",
        "--rounds",
        "6",
        "--trials",
        "9",
        "--iters",
        "300",
    ],
    "teperf default (8 pairs x 2 x 6 x 50)": [
        "--processes",
        "8",
        "--rounds",
        "2",
        "--trials",
        "6",
        "--iters",
        "50",
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    extra = args.extra or [
        "--base-path",
        str(ROOT / "examples/planted/base"),
        "--head-path",
        str(ROOT / "examples/planted/base"),
    ]
    tmp = Path(tempfile.mkdtemp())
    print(
        f"{'schedule':42s} {'run':>3s} {'wall s':>7s} {'half-width %':>13s} {'spread %':>9s} {'changes':>8s} "
        f"{'merit':>6s} {'pair sd %':>9s}"
    )
    for name, sched in SCHEDULES.items():
        merits, changes_total, cells_total = [], 0, 0
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "teperf",
                    "compare",
                    *extra,
                    *sched,
                    "--no-counters",
                    "--seed",
                    str(rep),
                    "--format",
                    "json",
                    "--results-dir",
                    str(tmp),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            wall = time.perf_counter() - t0
            if res.returncode != 0:
                print(f"{name}: failed: {res.stderr.strip()[-300:]}")
                break
            rows = [r for r in json.loads(res.stdout)["rows"] if r["status"] == "ok"]
            half = statistics.median((r["ci_high_pct"] - r["ci_low_pct"]) / 2 for r in rows)
            spread = statistics.median(r["base_spread_pct"] for r in rows)
            changes = sum(r["verdict"] in ("slower", "faster") for r in rows)
            changes_total += changes
            cells_total += len(rows)
            merit = half * math.sqrt(wall)
            merits.append(merit)
            # Between-pair sd: what a one-pair schedule carries but cannot see.
            pair_sds = [r["pair_sd_pct"] for r in rows if r.get("pair_sd_pct") is not None]
            pair_sd = f"{statistics.median(pair_sds):9.2f}" if pair_sds else f"{'-':>9s}"
            print(
                f"{name:42s} {rep:3d} {wall:7.1f} {half:13.2f} {spread:9.1f} {changes:4d}/{len(rows):<3d} "
                f"{merit:6.1f} {pair_sd}",
                flush=True,
            )
        if merits:
            print(
                f"{name:42s} median merit {statistics.median(merits):.1f}; false changes "
                f"{changes_total}/{cells_total}"
            )


if __name__ == "__main__":
    main()
