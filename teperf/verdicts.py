"""Verdicts: their names, rules (interval, load, --sweep slope), styles and the --fail-on groups."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from teperf.errors import TeperfError
from teperf.schema import ONETIME_COSTS

SLOWER, FASTER, NO_CHANGE, INCONCLUSIVE = "slower", "faster", "no change", "inconclusive"
NAMES = (SLOWER, FASTER, NO_CHANGE, INCONCLUSIVE)
TOO_FEW_PAIRS = "too few pairs"  # a one-time cost's verdict below stats.onetime_pairs_needed
TOO_FEW_GENERATIONS = "too few generations"  # the same where fork-server generations are the unit
LOAD = "load"  # the verdict_cause of a cell whose change is within what load could make (stats.load_bound)
# The verdict_cause of a cell whose interval rests on fewer independent units (process pairs, fork-server
# generations) than a verdict needs: one pair's interval covers trial noise only, and two units give a
# t interval whose sd is one difference. Such a cell is undecided, and --fail-on fails it.
FEW_UNITS = "few units"
MIN_VERDICT_UNITS = 3

# How each verdict is shown: the report's rich table, `teperf history`'s terminal, the dashboard.
STYLE = {SLOWER: "bold red", FASTER: "bold green", NO_CHANGE: "dim", INCONCLUSIVE: "yellow"}
HISTORY_STYLE = {SLOWER: "red", FASTER: "green", INCONCLUSIVE: "yellow", NO_CHANGE: "dim"}
CSS_CLASS = {SLOWER: "slower", FASTER: "faster", NO_CHANGE: "nochange", INCONCLUSIVE: "inconclusive"}
HTML_COLOR = {SLOWER: "#c0392b", FASTER: "#1e8449", NO_CHANGE: "#7f8c8d", INCONCLUSIVE: "#d68910"}

# what each --fail-on name matches
FAIL_ON = {SLOWER: {SLOWER}, FASTER: {FASTER}, "change": {SLOWER, FASTER}, INCONCLUSIVE: {INCONCLUSIVE}}


def verdict(delta_pct: float, low_pct: float | None, high_pct: float | None, cfg) -> str:
    """The interval rule: "no change" needs the whole interval inside +-``cfg.min_effect_pct``."""
    if low_pct is None or high_pct is None:
        return INCONCLUSIVE  # no interval at all: nothing was ruled out
    if (low_pct > 0 or high_pct < 0) and abs(delta_pct) >= cfg.min_effect_pct:
        return SLOWER if delta_pct > 0 else FASTER  # resolved, however wide
    if -cfg.min_effect_pct <= low_pct and high_pct <= cfg.min_effect_pct:
        return NO_CHANGE  # every change that matters is ruled out
    return INCONCLUSIVE


def inconclusive_bound(low_pct: float | None, high_pct: float | None, cfg) -> float | None:
    """The change an inconclusive interval could not rule out: its end farthest outside +-min_effect."""
    if low_pct is None or high_pct is None:
        return None
    outside = [v for v in (low_pct, high_pct) if abs(v) > cfg.min_effect_pct] or [low_pct, high_pct]
    return max(outside, key=abs)


def loaded(contended: int, couples: int, limit_pct: float) -> bool:
    """The load rule: more than ``limit_pct`` % of a cell's couples shared the core in every attempt.
    Then they count, and the interval is widened by the bias load could add (stats.load_bound): a verdict
    stands when it clears that, else the cell is inconclusive with verdict_cause LOAD."""
    return bool(couples) and 100.0 * contended / couples > limit_pct


def any_load(limit_pct: float) -> bool:
    """--max-contended 100: every couple counts however loaded, the load rule is off."""
    return limit_pct >= 100.0


def load_text(contended_pct: float | None, load_bound_pct: float | None) -> str:
    """How load reads beside a verdict: 'load: 83% contended, bias up to 2.1%'."""
    bound = f", bias up to {load_bound_pct:.1f}%" if load_bound_pct is not None else ""
    return f"load: {contended_pct or 0:.0f}% contended{bound}"


def qualifier(row) -> str:
    """What an inconclusive verdict adds (``row``: a records.Row): ' (load: 83% contended, bias up to 2.1%)'
    when load withheld it, else the change it could not rule out (' (up to +X%)'); '' for any other."""
    if row.verdict != INCONCLUSIVE:
        return ""
    if row.verdict_cause == FEW_UNITS:
        unit = "generation" if row.ci_basis in ("generations", "one generation") else "pair"
        n = row.n_generations if unit == "generation" else row.n_pairs
        return f" ({n or 0} {unit}{'s' if n != 1 else ''}: a verdict needs {MIN_VERDICT_UNITS})"
    if row.verdict_cause == LOAD:
        return f" ({load_text(row.contended_pct, row.load_bound_pct)})"
    return f" (up to {row.bound_pct:+.1f}%)" if row.bound_pct is not None else ""


def verdict_text(row) -> str:
    """The verdict as the table shows it: an inconclusive one with the change it could not rule out."""
    return (row.verdict or "-") + qualifier(row)


def onetime(row, cost: str):
    """The row as its one-time ``cost`` (schema.ONETIME_COSTS) reads: its verdict, change and bound."""
    figures = {k: getattr(row, f"{cost}_{k}") for k in ("verdict", "delta_pct", "bound_pct")}
    return dataclasses.replace(row, **figures, verdict_cause=None)


def slope_verdict(delta: dict) -> str:
    """--sweep: head - base slope, steeper or flatter when its interval excludes 0."""
    lo, hi = delta.get("lo"), delta.get("hi")
    if lo is None or hi is None:
        return INCONCLUSIVE
    if lo > 0:
        return "steeper"
    return "flatter" if hi < 0 else f"inconclusive (up to {max(abs(lo), abs(hi)):.2f} us/unit)"


def parse_fail_on(values: Iterable[str] | None) -> set[str]:
    """--fail-on values (repeatable, or comma lists) -> the verdicts that fail the run."""
    verdicts: set[str] = set()
    use = f"use {', '.join(FAIL_ON)} (repeat it or join with commas)"
    for value in values or ():
        names = [v.strip().lower() for v in str(value).split(",") if v.strip()]
        if not names:  # an empty CI variable would otherwise gate nothing, silently
            raise TeperfError(f"--fail-on {value!r} names no verdict", f"{use}, or leave --fail-on out")
        for name in names:
            if name not in FAIL_ON:
                raise TeperfError(f"--fail-on {name!r} is not a verdict", use)
            verdicts |= FAIL_ON[name]
    return verdicts


def failing_cells(rows: Sequence, verdicts: set[str]) -> list[str]:
    """'module/recipe[/shape/mode][ cost] verdict delta' of every per-step and one-time verdict given
    (``rows``: records.Row)."""
    shapes = len({r.shape for r in rows}) > 1
    undecided = bool(verdicts)  # a gate must not pass what the design could not decide
    modes = len({r.mode for r in rows}) > 1
    out = []
    for r in rows:
        cell = "/".join([r.module, r.recipe] + [r.shape] * shapes + [r.mode] * modes)
        figures = [("", r)] + [(f" {cost.replace('_', ' ')}", onetime(r, cost)) for cost in ONETIME_COSTS]
        for what, f in figures:
            if f.verdict not in verdicts and not (undecided and f.verdict_cause == FEW_UNITS):
                continue
            delta = f" {f.delta_pct:+.1f}%" if f.delta_pct is not None else ""
            out.append(f"{cell}{what} {f.verdict}{delta}{qualifier(f)}")
    return out
