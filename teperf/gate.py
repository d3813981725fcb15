"""The CI gate: which cells have a verdict the pipeline said to fail on (``--fail-on``).

It rests on the interval's verdict (teperf/stats.py), never on a bare ratio:
``slower`` fails only when the interval excludes 0 and the change is at least
min_effect; ``inconclusive`` fails when the run could not rule a change out.
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
    """'module/recipe[/shape/mode] verdict delta' of every row whose verdict is in ``verdicts``."""
    shapes = len({r.get("shape") for r in rows}) > 1
    modes = len({r.get("mode") for r in rows}) > 1
    out = []
    for r in rows:
        if r.get("verdict") not in verdicts:
            continue
        cell = "/".join(
            [r["module"], r["recipe"]] + ([r["shape"]] if shapes else []) + ([r["mode"]] if modes else [])
        )
        delta = f" {r['delta_pct']:+.1f}%" if r.get("delta_pct") is not None else ""
        bound = ""
        if r.get("verdict") == "inconclusive" and r.get("bound_pct") is not None:
            bound = f" (up to {r['bound_pct']:+.1f}%)"
        out.append(f"{cell} {r['verdict']}{delta}{bound}")
    return out
