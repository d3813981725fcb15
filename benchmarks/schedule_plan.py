"""How close a compare came to what the machine allows: per cell the half-width at the table's level, the
width one minute would give, the couple noise and the noise between pairs; per run the pairs a minute
against the start limit: the lanes over the start period the planner measured (the time per pair a lane
waited for starts), or where no lane waited, a pair per cold start on every two spare cores.
Prints figures; asserts nothing.

    .venv/bin/python benchmarks/schedule_plan.py BUNDLE [BUNDLE ...]         # figures of stored runs
    .venv/bin/python benchmarks/schedule_plan.py --run [-- teperf compare args]  # run one, then its figures

With no compare args, --run measures `make demo`'s blocks with a 60 s budget (the schedule plans itself).
On the GPU: `--run -- v2.16..plant --repo SRC --config pr-thread` (scripts/gpu/plan_check.sh).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from teperf.engine.autoschedule import cell_noise  # noqa: E402
from teperf.stats import clean_couples, half_width_pct  # noqa: E402
from teperf.summary import summarize  # noqa: E402
from teperf.summary.parse import parse  # noqa: E402

DEMO = [
    "--config",
    "demo",
    "--base-path",
    str(ROOT / "examples/planted/base"),
    "--head-path",
    str(ROOT / "examples/planted/head"),
    "--budget",
    "60s",
]


def couple_logs(cell, base: str, head: str, limit_pct: float, device: str) -> dict[int, list[float]]:
    """pair -> ln(head / base) of each couple of the cell (process CPU time) that the summary's rule keeps
    (teperf.stats.clean_couples)."""
    shared = lambda t: t.contended(device)  # noqa: E731
    used, _ = clean_couples(cell.trials, (base, head), "process_cpu_ns", limit_pct, shared)
    by_key: dict = defaultdict(dict)
    for t, us, key in used:
        by_key[key][t.side] = us
    out: dict[int, list[float]] = defaultdict(list)
    for (pair, _, _), sides in by_key.items():
        if len(sides) == 2:
            out[pair].append(math.log(sides[head] / sides[base]))
    return out


def figures(path: Path) -> dict:
    """The run's and each cell's figures (see the module's doc)."""
    parsed = parse(path)
    summary = summarize(path)
    stop = parsed.stop
    minutes = (stop.elapsed_s or 0) / 60 if stop else 0
    prestart = (stop.prestart or {}) if stop else {}
    pairs = max((r.n_pairs or 0 for r in summary.rows), default=0)
    config = summary.config
    lanes = config.known("lanes", 1)
    planned = (stop.schedule or {}) if stop else {}
    start_limit = None
    if planned.get("start_period_s"):  # the lanes waited for starts: one pair per period a lane, measured
        start_limit = 60 * lanes / planned["start_period_s"]
    elif prestart.get("start_s") and (prestart.get("spare_cores") or 0) >= 2:
        # no lane waited: a pair per cold start on every two spare cores, a bound the run did not reach
        start_limit = 60 * (prestart["spare_cores"] / 2) / prestart["start_s"]
    run = {
        "bundle": path.name,
        "lanes": lanes,
        "iters": config.known("schedule.iters"),
        "spawn": config.known("schedule.spawn"),
        "prestart": prestart.get("depth"),
        "pairs": pairs,
        "minutes": minutes,
        "pairs_per_min": pairs / minutes if minutes else None,
        "start_limit_per_min": start_limit,
        "schedule": planned,
    }
    cells, limit = [], config.known("stats.max_contended_pct", 20.0)
    for row, case in zip(summary.rows, parsed.cases):
        logs = couple_logs(
            parsed.cells.get(case.id), parsed.base_label, parsed.head_label or "head", limit, parsed.device
        )
        all_logs = [v for vs in logs.values() for v in vs]
        noise = cell_noise(row.key, logs)
        half = half_width_pct(row)
        cells.append(
            {
                "cell": f"{row.module}/{row.recipe}",
                "delta_pct": row.delta_pct,
                "delta_us": row.delta_us,
                "half_pct": half,
                "half_1min_pct": half * math.sqrt(minutes) if half is not None and minutes else None,
                "verdict": row.verdict,
                "couples": len(all_logs),
                "couple_sd_pct": 100 * noise.couple_sd if noise else None,
                "between_sd_pct": 100 * noise.between_sd if noise else None,
            }
        )
    return {"run": run, "cells": cells}


def _f(value, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def show(result: dict) -> None:
    run = result["run"]
    ratio = (
        run["pairs_per_min"] / run["start_limit_per_min"]
        if run["pairs_per_min"] and run["start_limit_per_min"]
        else None
    )
    print(
        f"{run['bundle']}: {run['lanes']} lanes, spawn {run['spawn']}, prestart {run['prestart']}, iters "
        f"{run['iters']}: {run['pairs']} pairs in {run['minutes']:.2f} min = "
        f"{_f(run['pairs_per_min'], '.1f')} a minute; start limit "
        f"{_f(run['start_limit_per_min'], '.1f')} a minute (ratio {_f(ratio)})"
    )
    if run["schedule"]:
        s = run["schedule"]
        print(f"  auto chose {s['rounds']} x {s['trials']} (couples {s['couples']}), a pair {s['pair_s']} s")
    print(
        "  cell                       delta      half(table)  half x sqrt(min)  couple sd  between sd  "
        "verdict"
    )
    for c in result["cells"]:
        delta = f"{_f(c['delta_pct'], '+.2f')}% ({_f(c['delta_us'], '+.1f')} us)"
        print(
            f"  {c['cell']:26} {delta:22} +-{_f(c['half_pct'])}%      +-{_f(c['half_1min_pct'])}%"
            f"           {_f(c['couple_sd_pct'])}%      {_f(c['between_sd_pct'])}%      {c['verdict']}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundles", nargs="*", type=Path)
    ap.add_argument("--run", action="store_true", help="run one compare first (args after --)")
    ap.add_argument("--results-dir", type=Path, default=None)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # argparse would take the compare args as bundles
    args, extra = ap.parse_args(argv[:cut]), argv[cut + 1 :]
    bundles = list(args.bundles)
    if args.run:
        out = args.results_dir or Path(tempfile.mkdtemp(prefix="teperf-plan-"))
        cmd = [sys.executable, "-m", "teperf", "compare", *(extra or DEMO), "--results-dir", str(out)]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT)
        bundles += sorted(p for p in out.iterdir() if (p / "meta.json").is_file())
    for path in bundles:
        show(figures(path))
    if not bundles:
        ap.error("give bundles, or --run")


if __name__ == "__main__":
    main()
