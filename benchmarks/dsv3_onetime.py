"""The DSv3 run's one-time figures from its bundles (scripts/gpu/dsv3.sh), as markdown: per cell the first
call, the recompile under another recipe and the switch back (the session records all three; the one-time
table shows the first two), each over the process pairs; compile's first call against depth (least-squares
slope and intercept over every pair's point); the counters where --counters ran.

    python3 benchmarks/dsv3_onetime.py RESULTS_DIR...   (each holds bundles, found by their meta.json)
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from teperf.summary import parse
from teperf.summary.aggregate import onetime_ms

COSTS = ("first_call", "recompile", "switch_back")
COUNTERS = ("kernel_launches", "python_calls", "syncs", "graphs", "graph_breaks")


def _ms(values: list) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    spread = f" [{min(values):,.1f}..{max(values):,.1f}]" if len(values) > 1 else ""
    return f"{med:,.1f}{spread}"


def _fit(points: list) -> str:
    """Least squares ms = intercept + slope x layers over (layers, ms) points."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return "- (one depth)"
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return f"{slope:,.1f} ms per layer, intercept {my - slope * mx:,.1f} ms ({len(points)} points)"


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
