"""The DSv3 run's one-time figures from its bundles (scripts/gpu/dsv3.sh), as markdown: per cell the first
call, the recompile under another recipe and the switch back (the session records all three; the one-time
table shows the first two), each as the mean over the process pairs with its 95 % t interval; compile's first
call against depth (least-squares slope and intercept over every pair's point, with their 95 % t intervals);
the counters where --counters ran.

    python3 benchmarks/dsv3_onetime.py RESULTS_DIR...   (each holds bundles, found by their meta.json)
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from plant_truth import fit_line  # this folder's own: run as a script, benchmarks/ is on sys.path

from teperf.stats import t_interval
from teperf.summary import parse
from teperf.summary.aggregate import onetime_ms

COSTS = ("first_call", "recompile", "switch_back")
COUNTERS = ("kernel_launches", "python_calls", "syncs", "graphs", "graph_breaks")


def _ms(values: list) -> str:
    """The mean over pairs, its 95 % t half-width, and the pairs' range (one pair: its value alone)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:,.1f}"
    mean, half, _, _ = t_interval(values, 0.05)
    return f"{mean:,.1f} +- {half:,.1f} [{min(values):,.1f}..{max(values):,.1f}]"


def _fit(points: list) -> str:
    """Least squares ms = intercept + slope x layers over (layers, ms) points, with 95 % t half-widths."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return "- (one depth)"
    fit = fit_line(xs, [y for _, y in points])
    return (
        f"{fit['slope']:,.1f} +- {fit['slope_hw']:,.1f} ms per layer, intercept {fit['intercept']:,.1f} +- "
        f"{fit['intercept_hw']:,.1f} ms ({fit['n']} points; per depth: "
        + ", ".join(f"{x}: {statistics.median(y for d, y in points if d == x):,.0f}" for x in sorted(set(xs)))
        + " ms median)"
    )


def main(dirs: list[str]) -> int:
    bundles = sorted({p.parent for d in dirs for p in Path(d).rglob("meta.json")})
    if not bundles:
        print(f"no bundles under {' '.join(dirs)}")
        return 1
    depth: dict = defaultdict(list)  # (module family, recipe) -> [(layers, compile first call ms)]
    for bundle in bundles:
        parsed = parse(bundle)
        metric = parsed.config.stats.metric
        print(f"\n### {bundle.name} ({parsed.device or 'device unknown'}; clock {metric})\n")
        facts = next((w.hello["backend_te"] for w in parsed.workers if w.hello.get("backend_te")), {})
        if facts:
            print(f"TE {facts.get('version')} at {facts.get('location')}; DSv3 parts: {facts.get('dsv3')}\n")
        print("| module | recipe | mode | pairs | first call ms | recompile ms | switch back ms | status |")
        # each cost: mean +- 95 % t half-width over the pairs [their range]
        print("|---|---|---|---|---|---|---|---|")
        counter_rows = []
        for case in parsed.cases:
            cell = parsed.cell(case.id)
            per = {cost: [] for cost in COSTS}
            for setup in cell.ready:
                info = setup.info or {}
                for cost in COSTS:
                    ms = onetime_ms(info.get(cost), metric)
                    if ms is not None:
                        per[cost].append(ms)
                first = onetime_ms(info.get("first_call"), metric)
                if case.mode == "compile" and first is not None:
                    family = re.sub(r"\[layers=\d+\]", "", case.module)  # a --sweep layers=... variant
                    depth[(family, case.recipe)].append((info.get("layers", 1), first))
            errors = [s.error for s in cell.setups.values() if s.error]
            pairs = len(cell.ready)
            ok = "ok" if pairs else "not measured (the run ended first)"
            status = case.skip or (str(errors[0]).replace("\n", " / ")[:240] if errors else ok)
            row = [case.module, case.recipe, case.mode, pairs, *(_ms(per[c]) for c in COSTS), status]
            print("| " + " | ".join(str(v).replace("|", "/") for v in row) + " |")
            for side, counters in cell.counters.items():
                counter_rows.append(
                    [case.module, case.recipe, case.mode, side, *(counters.get(k) for k in COUNTERS)]
                )
        if counter_rows:
            print("\n| module | recipe | mode | side | " + " | ".join(COUNTERS) + " |")
            print("|---" * (4 + len(COUNTERS)) + "|")
            for row in counter_rows:
                print("| " + " | ".join("-" if v is None else str(v) for v in row) + " |")
    if depth:
        print("\n### compile's first call against depth\n")
        for (family, recipe), points in sorted(depth.items()):
            print(f"- {family} {recipe}: {_fit(points)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["."]))
