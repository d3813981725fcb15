"""Do parallel lanes keep teperf calibrated? Runs the same compares with --lanes 1, 2, 4, 8 (those this
machine has physical cores for; the others are listed as skipped) and prints per lane count:

- A/A false changes: every cell but the planted one runs the same code on both sides;
- the planted change: detected (slower) in how many runs, and its size (it must not move with the lanes);
- half-width reached, pairs measured and half-width x sqrt(measuring minutes) (lower = more precision per
  minute; measuring = first to last trial, so the cold start of the first pair does not count);
- per-lane agreement: cells where `report --by-lane` finds the lanes' per-pair deltas differ (ANOVA p < 0.05);
- whether lanes slow each other's steps: the base side's per-step time against the 1-lane runs, and the
  spread of the lanes' levels inside a run.

Asserts nothing. Each run is `teperf compare ... --precision 0.1 --budget B` (a width no run reaches, so the
budget decides: the same wall time for every lane count). Lane counts are interleaved, run by run, so that a
slow spell of the machine does not fall on one lane count only.

    .venv/bin/python benchmarks/lanes_calibration.py [--lanes 1,2,4,8] [--runs 2] [--budget 60s] [--planted
    MLP]
        [--out DIR] [-- teperf compare args naming the sides and cells]

Default sides and cells (the CPU): `--config demo`, base examples/planted/base, head examples/planted/head,
whose MLP busy-waits 100 us (planted) while Linear and LayerNormLinear are the same code (A/A).
On a GPU, docs/measuring.md ("On a GPU (not run yet)") gives the TE cells and planted TE overlay to pass.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from teperf.config import parse_duration  # noqa: E402
from teperf.cpus import available_cores, physical_cores  # noqa: E402

PLANTED = ROOT / "examples" / "planted"


RUN_GRACE_S = 150  # past its budget a run is sent SIGINT (it stops, keeps and prints its samples)
# Ctrl-C or `timeout --signal=INT`: the run in progress ends cleanly, the figures so far are printed
STOPPED = []


def teperf(*args: str, timeout_s: float | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-m", "teperf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as stop:
        if isinstance(stop, KeyboardInterrupt):
            STOPPED.append(True)  # Ctrl-C and `timeout` signal the whole process group: teperf has it too
        else:
            proc.send_signal(signal.SIGINT)  # teperf stops within seconds and prints what it measured
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def one_run(lanes: int, run: int, args, extra: list[str]) -> dict | None:
    out = Path(args.out) / f"lanes{lanes}-run{run}"
    t0 = time.perf_counter()
    res = teperf(
        "compare",
        *extra,
        "--lanes",
        str(lanes),
        "--precision",
        "0.1",
        "--budget",
        args.budget,
        "--no-counters",
        "--seed",
        str(run),
        "--format",
        "json",
        "--results-dir",
        str(out),
        timeout_s=parse_duration(args.budget) + RUN_GRACE_S,
    )
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 1, 130) or not res.stdout.strip():
        print(
            f"lanes {lanes} run {run}: failed (exit {res.returncode}): {res.stderr.strip()[-400:]}",
            flush=True,
        )
        return None
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [
        r
        for r in json.loads(res.stdout)["rows"]
        if r["status"] in ("ok", "partial") and r.get("delta_pct") is not None
    ]
    by_lane = json.loads(
        teperf("report", str(bundle), "--by-lane", "--format", "json").stdout or '{"lanes": []}'
    )["lanes"]
    records = [
        json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines() if line.strip()
    ]
    times = [r["t"] for r in records if r.get("kind") == "trial"]
    starts = [r["start_s"] for r in records if r.get("kind") == "pair"]
    return {
        "lanes": lanes,
        "run": run,
        "wall": wall,
        "rows": rows,
        "by_lane": by_lane,
        "bundle": str(bundle),
        "measuring_min": (max(times) - min(times)) / 60 if len(times) > 1 else None,
        "pairs": max((r["n_pairs"] for r in rows), default=0),
        "pair_start_s": statistics.median(starts) if starts else None,
    }


def half_width(row: dict) -> float:
    return (row["ci_high_pct"] - row["ci_low_pct"]) / 2


def describe(result: dict, planted: str) -> str:
    aa = [r for r in result["rows"] if r["module"] != planted]
    hit = [r for r in result["rows"] if r["module"] == planted]
    halves = [half_width(r) for r in result["rows"] if r["ci_low_pct"] is not None]
    differ = sum(r.get("agree") == "NO" for r in result["by_lane"])
    planted_text = (
        ", ".join(f"{r['verdict']} {r['delta_pct']:+.1f}% ({r['delta_us']:+.0f} us)" for r in hit) or "-"
    )
    merit = (
        (statistics.median(halves) * result["measuring_min"] ** 0.5)
        if halves and result["measuring_min"]
        else None
    )
    return (
        f"lanes {result['lanes']} run {result['run']}: wall {result['wall']:.0f} s, measuring "
        f"{(result['measuring_min'] or 0) * 60:.0f} s, {result['pairs']} pairs (start "
        f"{result['pair_start_s'] or 0:.1f} s median); "
        f"A/A {sum(r['verdict'] in ('slower', 'faster') for r in aa)}/{len(aa)} false changes; planted "
        f"{planted_text}; "
        f"half-width median {statistics.median(halves) if halves else float('nan'):.2f}%"
        + (f", x sqrt(min) {merit:.2f}" if merit else "")
        + f"; lanes differ in {differ} cells"
    )


def summary_table(results: list[dict], planted: str) -> list[str]:
    by = defaultdict(list)
    for r in results:
        by[r["lanes"]].append(r)
    base_level = {}  # (module, recipe) -> median base us with 1 lane
    for r in by.get(1, []):
        for row in r["rows"]:
            base_level.setdefault((row["module"], row["recipe"]), []).append(row["base_us"])
    lines = [
        "| lanes | runs | A/A false changes | planted slower | planted delta | pairs per run | pairs per "
        "measuring min | "
        "median half-width | half-width x sqrt(measuring min) | x sqrt(wall min) | cells where lanes differ "
        "| base time vs 1 lane | lane levels (max-min) |",
        "|" + "---|" * 13,
    ]
    for lanes in sorted(by):
        runs = by[lanes]
        rows = [row for r in runs for row in r["rows"]]
        aa = [row for row in rows if row["module"] != planted]
        hit = [row for row in rows if row["module"] == planted]
        halves = [half_width(row) for row in rows if row["ci_low_pct"] is not None]
        run_half = {
            id(r): statistics.median(
                [half_width(x) for x in r["rows"] if x["ci_low_pct"] is not None] or [0.0]
            )
            for r in runs
        }
        merits = [
            run_half[id(r)] * r["measuring_min"] ** 0.5 for r in runs if r["measuring_min"] and r["rows"]
        ]
        wall_merits = [run_half[id(r)] * (r["wall"] / 60) ** 0.5 for r in runs if r["rows"]]
        rate = [r["pairs"] / r["measuring_min"] for r in runs if r["measuring_min"]]
        tested = [x for r in runs for x in r["by_lane"] if x.get("agree") in ("yes", "NO")]
        differ = sum(x["agree"] == "NO" for x in tested)
        ratios = [
            row["base_us"] / statistics.median(base_level[(row["module"], row["recipe"])]) - 1
            for row in rows
            if (row["module"], row["recipe"]) in base_level and row["base_us"]
        ]
        spreads = []
        for r in runs:
            levels = defaultdict(list)
            for x in r["by_lane"]:
                if x["lane"] != "all" and x.get("level_pct") is not None:
                    levels[(x["module"], x["recipe"])].append(x["level_pct"])
            spreads += [max(v) - min(v) for v in levels.values() if len(v) > 1]
        deltas = ", ".join(f"{x['delta_pct']:+.1f}% ({x['delta_us']:+.0f} us)" for x in hit) or "-"
        fmt = lambda v, spec="{:.2f}": "-" if v is None else spec.format(v)  # noqa: E731
        med = lambda v: statistics.median(v) if v else None  # noqa: E731
        lines.append(
            f"| {lanes} | {len(runs)} | {sum(x['verdict'] in ('slower', 'faster') for x in aa)} of {len(aa)} "
            "| "
            f"{sum(x['verdict'] == 'slower' for x in hit)} of {len(hit)} | "
            f"{deltas} | {', '.join(str(r['pairs']) for r in runs)} | "
            f"{fmt(med(rate), '{:.1f}')} | {fmt(med(halves))}% | {fmt(med(merits))} | "
            f"{fmt(med(wall_merits))} | "
            f"{differ} of {len(tested)} | {fmt(med(ratios) and med(ratios) * 100, '{:+.1f}%')} | "
            f"{fmt(med(spreads), '{:.1f}%')} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--lanes", default="1,2,4,8", help="lane counts to try (those beyond the physical cores are skipped)"
    )
    ap.add_argument("--runs", type=int, default=2, help="runs per lane count")
    ap.add_argument("--budget", default="60s", help="wall time of each run (teperf --budget)")
    ap.add_argument(
        "--planted", default="MLP", help="the module whose head has a planted slowdown; the others are A/A"
    )
    ap.add_argument(
        "--out", default=None, help="where the bundles and lanes.md go (default: a temporary directory)"
    )
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    if args.out is None:
        import tempfile

        args.out = tempfile.mkdtemp(prefix="teperf-lanes-")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    extra = args.extra or [
        "--config",
        "demo",
        "--base-path",
        str(PLANTED / "base"),
        "--head-path",
        str(PLANTED / "head"),
    ]
    physical = len(physical_cores(available_cores()))
    wanted = [int(n) for n in args.lanes.split(",")]
    counts = [n for n in wanted if n <= physical]
    print(
        f"{physical} physical cores available; lane counts {counts}"
        + (
            f" (skipped, not enough physical cores: {[n for n in wanted if n > physical]})"
            if len(counts) < len(wanted)
            else ""
        )
    )
    print(
        f"each run: teperf compare {' '.join(extra)} --lanes N --precision 0.1 --budget {args.budget}; "
        f"planted: {args.planted}",
        flush=True,
    )
    results = []
    try:
        run_all(args, counts, extra, results)
    except KeyboardInterrupt:
        print("stopped by a signal: the figures below cover the runs finished so far", flush=True)
    table = summary_table(results, args.planted)
    print("\n" + "\n".join(table))
    (Path(args.out) / "lanes.md").write_text("\n".join(table) + "\n")
    (Path(args.out) / "lanes.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\nbundles, lanes.md and lanes.json in {args.out}")


def run_all(args, counts: list[int], extra: list[str], results: list[dict]) -> None:
    for run in range(args.runs):
        order = (
            counts[run % len(counts) :] + counts[: run % len(counts)]
        )  # rotate: no lane count always first
        for lanes in order:
            if STOPPED:
                return
            result = one_run(lanes, run, args, extra)
            if result:
                results.append(result)
                print(
                    describe(result, args.planted) + (" (stopped by a signal)" if STOPPED else ""), flush=True
                )


if __name__ == "__main__":
    main()
