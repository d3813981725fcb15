"""--spawn fresh vs forkserver on the CPU (issue 23): pairs per budget, the planted change, A/A false changes.

Each run is a real `teperf compare` of the demo config within a fixed wall-clock budget (the
schedule's pair count is set high so that the budget ends it):
  planted: examples/planted/base vs head (MLP +100 us, the others unchanged)
  A/A:     examples/planted/base on both sides (a deliberate A/A: every cell should read no change)
Prints, per mode: pairs measured per run and per minute with the prestart depth the run chose
(issue 34: the bundle's stop record), the units the intervals are taken over (pairs; with
forkserver, server generations), the planted MLP delta, and the false changes over all unchanged
cells. Figures, not asserts.

    python benchmarks/spawn_calibration.py --runs 3 --budget 60s
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "examples" / "planted"


def compare(head: Path, spawn: str, budget: str, results: Path, extra: list[str]) -> dict:
    argv = [
        sys.executable, "-m", "teperf", "compare", "--config", "demo",
        "--base-path", str(PLANTED / "base"), "--head-path", str(head),
        "--spawn", spawn, "--processes", "200", "--budget", budget,
        "--format", "json", "--results-dir", str(results), *extra,
    ]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if res.returncode not in (0, 1):
        raise SystemExit(f"compare failed ({res.returncode}): {res.stderr[-2000:]}")
    data = json.loads(res.stdout)
    data["stop"] = stop_record(results)
    return data


def stop_record(results: Path) -> dict:
    """The run's stop record (pairs, elapsed_s, prestart: depth, spare cores, lanes' waits)."""
    for path in sorted(results.glob("*/records.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "stop":
                return record
    return {}


def per_minute(stop: dict) -> float:
    return 60 * (stop.get("pairs") or 0) / max(stop.get("elapsed_s") or 0, 1e-9)


def prestart_text(stop: dict) -> str:
    p = stop.get("prestart") or {}
    return (
        f"prestart depth {p.get('depth')} (up to {p.get('max_depth')}; {p.get('spare_cores')} spare cores; "
        f"start {p.get('start_s')} s vs measure {p.get('measure_s')} s; lanes waited {p.get('lane_wait_s')} "
        "s): "
        f"{per_minute(stop):.1f} pairs/min"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per mode and kind (planted, A/A)")
    ap.add_argument("--budget", default="60s")
    ap.add_argument("--server-pairs", default="4")
    ap.add_argument("--spawns", default="fresh,forkserver", help="comma-separated --spawn modes")
    args = ap.parse_args()
    extra = ["--server-pairs", args.server_pairs]
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="teperf-spawn-bench-") as tmp:
        for run in range(args.runs):
            for spawn in args.spawns.split(","):
                for kind, head in (("planted", PLANTED / "head"), ("aa", PLANTED / "base")):
                    data = compare(head, spawn, args.budget, Path(tmp) / f"{spawn}-{kind}-{run}", extra)
                    rows = {r["module"]: r for r in data["rows"]}
                    entry = out.setdefault(
                        spawn,
                        {
                            "pairs": [],
                            "units": [],
                            "mlp_us": [],
                            "cells": 0,
                            "false": 0,
                            "widths": [],
                            "rate": [],
                        },
                    )
                    entry["rate"].append(per_minute(data["stop"]))
                    pairs = max(r.get("n_pairs") or 0 for r in rows.values())
                    entry["pairs"].append(pairs)
                    # the intervals' independent draws: pairs, or with forkserver the server generations
                    every = int(args.server_pairs) if spawn == "forkserver" else 1
                    entry["units"].append(-(-pairs // every))
                    for module, r in rows.items():
                        if kind == "planted" and module == "MLP":
                            entry["mlp_us"].append(r["delta_us"])
                            continue
                        entry["cells"] += 1
                        entry["false"] += r["verdict"] in ("slower", "faster")
                        if r.get("ci_low_us") is not None and r.get("base_us"):
                            entry["widths"].append(50 * (r["ci_high_us"] - r["ci_low_us"]) / r["base_us"])
                    generations = [
                        n for n in data.get("notes") or [] if n.startswith("fork-server generations")
                    ]
                    print(
                        f"run {run + 1} {spawn:10s} {kind:7s}: {entry['pairs'][-1]} pairs; "
                        f"{prestart_text(data['stop'])}; "
                        + ", ".join(f"{m} {r['delta_us']:+.1f} us {r['verdict']}" for m, r in rows.items())
                        + "".join(
                            f"\n    {n}" for n in generations
                        ),  # do a generation's pairs move together?
                        flush=True,
                    )
    print(
        f"\nbudget {args.budget} per run, {args.runs} runs per mode and kind; server pairs "
        f"{args.server_pairs}"
    )
    print(
        "| spawn | pairs per run (median) | pairs per minute (median) | units per run (median) "
        "| planted MLP delta us (median, range) | A/A false changes | median half-width |"
    )
    print("|---|---|---|---|---|---|---|")
    for spawn, e in out.items():
        mlp = e["mlp_us"]
        print(
            f"| {spawn} | {statistics.median(e['pairs']):g} | {statistics.median(e['rate']):.1f} "
            f"| {statistics.median(e['units']):g} "
            f"| {statistics.median(mlp):+.1f} ({min(mlp):+.1f}..{max(mlp):+.1f}) "
            f"| {e['false']} of {e['cells']} | {statistics.median(e['widths']):.2f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
