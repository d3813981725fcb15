"""Summarize stored compare bundles with the per-cell rule (before issue 32's table rule) and the table rule:
slower/faster verdicts per repetition directory (each holds the bundles of one done-when-1 repetition).

    .venv/bin/python results/evidence/cpu-calibration/table-rule-1204/rereport.py DIR [DIR ...]
"""

import sys
from pathlib import Path

from teperf.summary import stats_from_meta
from teperf.summary.aggregate import aggregate
from teperf.summary.parse import parse

CALLED = ("slower", "faster")


def called(rows) -> tuple[int, int, int]:
    """(per-step cells, one-time cells, slower/faster among them)."""
    step = [r.verdict for r in rows if r.verdict]
    once = [r.first_call_verdict for r in rows if r.first_call_verdict]
    return len(step), len(once), sum(v in CALLED for v in step + once)


for top in sys.argv[1:]:
    for rep in sorted(p for p in Path(top).iterdir() if p.is_dir()):
        bundles = sorted(m.parent for m in rep.rglob("meta.json"))
        tally = {"per cell": [0, 0, 0], "table": [0, 0, 0]}
        lines = []
        for b in bundles:
            parsed = parse(b)
            stats = stats_from_meta(parsed.meta)
            for name, rule in (("per cell", False), ("table", True)):
                rows, levels = aggregate(parsed, stats, table_rule=rule)
                for i, v in enumerate(called(rows)):
                    tally[name][i] += v
                if rule:
                    lines.append(
                        f"    {b.name}: level {(1 - levels.alpha) * 100:.1f}% over {levels.family} cells; "
                        + ", ".join(
                            f"{r.module} {r.verdict} {r.delta_pct:+.2f}% "
                            f"[{r.ci_low_pct:+.2f}, {r.ci_high_pct:+.2f}] p={r.p_value:.3f}"
                            f" / first call {r.first_call_verdict}"
                            for r in rows
                        )
                    )
        s, o, c = tally["per cell"]
        ts, to, tc = tally["table"]
        print(f"{rep.name}: {len(bundles)} compares; per-cell rule {c} slower/faster of {s + o} cells; "
              f"table rule {tc} of {ts + to} cells ({ts} per step, {to} one-time)")
        print("\n".join(lines))
