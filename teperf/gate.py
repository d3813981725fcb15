"""The CI gate: which cells have a verdict the pipeline said to fail on (``--fail-on``).

It rests on the interval's verdict (teperf/stats.py), never on a bare ratio:
``slower`` fails only when the interval excludes 0 and the change is at least
min_effect; ``inconclusive`` fails when the run could not rule a change out (also for
load). One-time costs are gated too; their "too few pairs" / "too few generations" match no --fail-on name.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from teperf.errors import TeperfError

# what each --fail-on name matches
FAIL_ON = {
    "slower": {"slower"},
    "faster": {"faster"},
    "change": {"slower", "faster"},
    "inconclusive": {"inconclusive"},
}


def parse_fail_on(values: Iterable[str] | None) -> set[str]:
    """--fail-on values (repeatable, or comma lists) -> the verdicts that fail the run."""
    verdicts: set[str] = set()
    for value in values or ():
        names = [v.strip().lower() for v in str(value).split(",") if v.strip()]
        if not names:  # an empty CI variable would otherwise gate nothing, silently
            raise TeperfError(
                f"--fail-on {value!r} names no verdict",
                f"use {', '.join(FAIL_ON)} (repeat it or join with commas), or leave --fail-on out",
            )
        for name in names:
            if name not in FAIL_ON:
                raise TeperfError(
                    f"--fail-on {name!r} is not a verdict",
                    f"use {', '.join(FAIL_ON)} (repeat it or join with commas)",
                )
            verdicts |= FAIL_ON[name]
    return verdicts


def failing_cells(rows: Sequence[dict], verdicts: set[str]) -> list[str]:
    """'module/recipe[/shape/mode][ cost] verdict delta' of every row's per-step verdict, and of its one-time
    verdicts (first call, recompile: their own minimum effect, teperf/stats.py), that is in ``verdicts``."""
    from teperf.schema import ONETIME_COSTS

    shapes = len({r.get("shape") for r in rows}) > 1
    modes = len({r.get("mode") for r in rows}) > 1
    out = []
    for r in rows:
        cell = "/".join(
            [r["module"], r["recipe"]] + ([r["shape"]] if shapes else []) + ([r["mode"]] if modes else [])
        )
        figures = [("", r)] + [
            (
                f" {cost.replace('_', ' ')}",
                {k: r.get(f"{cost}_{k}") for k in ("verdict", "delta_pct", "bound_pct")},
            )
            for cost in ONETIME_COSTS
        ]
        for what, f in figures:
            if f.get("verdict") not in verdicts:
                continue
            delta = f" {f['delta_pct']:+.1f}%" if f.get("delta_pct") is not None else ""
            bound = ""
            if f.get("verdict") == "inconclusive" and f.get("bound_pct") is not None:
                bound = f" (up to {f['bound_pct']:+.1f}%)"
            elif f.get("verdict_cause") == "load":
                bound = f" (load: {f.get('contended_pct') or 0:.0f}% of couples shared their core)"
            out.append(f"{cell}{what} {f['verdict']}{delta}{bound}")
    return out
