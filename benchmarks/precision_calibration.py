"""Calibration of `--precision` on the CPU: many A/A compares (the same code on both sides) run
until every cell's 95 % half-width is at most P or the budget is spent. Prints, per run and in
total, how often a false `slower`/`faster` came out, how often `no change`, how often
`inconclusive`, the wall time to reach P and the pairs each cell used. Asserts nothing.

    .venv/bin/python benchmarks/precision_calibration.py [--repeats 8] [--precision 3] [--budget 60s] [-- extra teperf args]

Default cells: teperf/configs/default.toml (the plain-PyTorch reference modules), base and head the same path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def stop_record(results_dir: Path) -> dict:
    (bundle,) = list(results_dir.iterdir())
    lines = (bundle / "records.jsonl").read_text().splitlines()
    return next((r for r in map(json.loads, reversed(lines)) if r.get("kind") == "stop"), {})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--precision", default="3")
    ap.add_argument("--budget", default="60s")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    same = str(ROOT / "examples/planted/base")
    extra = args.extra or ["--config", "default", "--base-path", same, "--head-path", same]
    tmp = Path(tempfile.mkdtemp())
    verdicts: Counter = Counter()
    reached_walls, pairs_used, halves = [], [], []
    print(f"A/A with --precision {args.precision} --budget {args.budget}: {' '.join(extra)}")
    print(
        f"{'run':>3s} {'wall s':>7s} {'stop':>18s} {'pairs per cell':>15s} {'half-widths %':>22s}  verdicts"
    )
    t_all = time.perf_counter()
    for rep in range(args.repeats):
        out = tmp / f"run{rep}"
        t0 = time.perf_counter()
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "teperf",
                "compare",
                *extra,
                "--precision",
                args.precision,
                "--budget",
                args.budget,
                "--no-counters",
                "--seed",
                str(rep),
                "--format",
                "json",
                "--results-dir",
                str(out),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            print(f"{rep:3d} failed: {res.stderr.strip()[-300:]}")
            continue
        rows = [r for r in json.loads(res.stdout)["rows"] if r["status"] == "ok"]
        stop = stop_record(out)
        run_pairs = [r["n_pairs"] for r in rows]
        run_halves = [(r["ci_high_pct"] - r["ci_low_pct"]) / 2 for r in rows if r["ci_low_pct"] is not None]
        verdicts.update(r["verdict"] for r in rows)
        pairs_used += run_pairs
        halves += run_halves
        if stop.get("reason") == "precision reached":
            reached_walls.append(wall)
        print(
            f"{rep:3d} {wall:7.1f} {stop.get('reason', '?'):>18s} {','.join(map(str, run_pairs)):>15s} "
            f"{','.join(f'{h:.1f}' for h in run_halves):>22s}  {', '.join(r['verdict'] for r in rows)}",
            flush=True,
        )
    cells = sum(verdicts.values())
    if not cells:
        return

    def rate(*names: str) -> str:
        n = sum(verdicts[name] for name in names)
        return f"{n}/{cells} ({100 * n / cells:.0f}%)"

    print(f"\ncells: {cells} in {args.repeats} runs, {time.perf_counter() - t_all:.0f} s in all")
    print(
        f"false slower/faster: {rate('slower', 'faster')}; no change: {rate('no change')}; "
        f"inconclusive: {rate('inconclusive')}"
    )
    print(
        f"runs that reached +-{args.precision}%: {len(reached_walls)}/{args.repeats}"
        + (
            f", wall {min(reached_walls):.0f}-{max(reached_walls):.0f} s (median {statistics.median(reached_walls):.0f})"
            if reached_walls
            else ""
        )
    )
    print(
        f"pairs per cell: {min(pairs_used)}-{max(pairs_used)} (median {statistics.median(pairs_used):.0f}); "
        f"half-width {min(halves):.2f}-{max(halves):.2f}% (median {statistics.median(halves):.2f})"
    )


if __name__ == "__main__":
    main()
