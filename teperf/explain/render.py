"""The explain texts: a profile diff as text or JSON, a counter diff in one line, the explain report."""

from __future__ import annotations

from typing import Optional

from teperf.explain.diff import (
    COUNTER_LABELS,
    FunctionDelta,
    apply_intervals,
    by_calls,
    by_own_time,
    counter_deltas,
    diff_profiles,
)
from teperf.numbers import signed_us
from teperf.provenance import side_line


def count_text(value: float) -> str:
    return f"{int(value):+d}" if value == int(value) else f"{value:+.2f}"


def calls_text(d: FunctionDelta) -> str:
    """'+5 calls of f (pkg/mod.py:12)'."""
    where = f" ({d.where})" if d.where else ""
    return f"{count_text(d.d_calls)} {'call' if abs(d.d_calls) == 1 else 'calls'} of {d.name}{where}"


def summary(deltas: list[FunctionDelta], n_time: int = 2, n_calls: int = 2) -> str:
    """One line: call-count changes first (they repeat exactly), then own-time changes excluding 0."""
    parts = [calls_text(d) for d in by_calls(deltas, n_calls)]
    timed = [d for d in by_own_time(deltas) if d.d_own_us != 0 and d.own_settled is not False]
    for d in timed[:n_time]:
        pm = f" {d.own_pm}" if d.own_pm else ""
        parts.append(f"{signed_us(d.own_shown_us)}{pm} in {d.name}" + (f" ({d.where})" if d.where else ""))
    unsettled = sum(1 for d in deltas if d.d_own_us != 0 and d.own_settled is False)
    if not parts:
        return "no function-level difference" + (
            f" beyond the noise ({unsettled} own-time changes within their intervals)" if unsettled else ""
        )
    return ", ".join(parts)


def render_text(deltas: list[FunctionDelta], n: int = 15, title: str = "") -> str:
    """Two plain-text tables: top-n by own-time delta and by call-count delta."""
    lines = [title] if title else []
    total_base = sum(d.base_own_us for d in deltas)
    total_head = sum(d.head_own_us for d in deltas)
    lines += [
        f"profiled own time per step: base {total_base:.1f} us, head {total_head:.1f} us "
        f"({signed_us(total_head - total_base)}; includes cProfile overhead)",
        "",
        f"By own time (top {n}; +- is the 95% interval over the repeats, ~ marks one that includes 0):",
        f"  {'delta':>10} {'+-':>11} {'base':>9} {'head':>9} {'calls b/h':>13}  function",
    ]
    for d in by_own_time(deltas, n):
        pm = "" if d.own_hw_us is None else ("~" if d.own_settled is False else "") + d.own_pm
        lines.append(
            f"  {signed_us(d.own_shown_us):>10} {pm:>11} {d.base_own_us:>9.1f} {d.head_own_us:>9.1f} "
            f"{_calls_pair(d):>13}  {d.name}  {d.where}{_presence(d)}"
        )
    changed = by_calls(deltas, n)
    lines += ["", f"By calls per step ({len(by_calls(deltas))} functions changed; top {n}):"]
    if not changed:
        lines.append("  (no call count changed)")
    for d in changed:
        lines.append(
            f"  {count_text(d.d_calls):>10} {_calls_pair(d):>19} {signed_us(d.d_cum_us):>10} cum  "
            f"{d.name}  {d.where}{_presence(d)}"
        )
    return "\n".join(lines)


def _calls_pair(d: FunctionDelta) -> str:
    return "/".join(count_text(v).lstrip("+") for v in (d.base_calls, d.head_calls))


def _presence(d: FunctionDelta) -> str:
    # cProfile lists only functions that ran: "not called" may also mean "does not exist"
    return f"  [not called in {'base' if d.in_head else 'head'}]" if d.in_base != d.in_head else ""


def to_json(deltas: list[FunctionDelta], n: int = 50) -> dict:
    return {
        "by_own_time": [d.to_dict() for d in by_own_time(deltas, n)],
        "by_calls": [d.to_dict() for d in by_calls(deltas, n)],
        "summary": summary(deltas),
    }


def counters_diff(base: Optional[dict], head: Optional[dict], full: bool = False) -> str:
    """E.g. "+14 py calls, +1 aten op, 0 kernels": the always-shown ones even at 0, others when changed."""
    if not base or not head:
        return ""
    deltas = counter_deltas(base, head)
    parts = []
    for key, one, many, always in COUNTER_LABELS:
        value = deltas[key]
        if value is None or (value == 0 and not (always or full)):
            continue
        value = int(value)
        label = one if abs(value) == 1 else many
        parts.append(f"{value:+d} {label}" if value else f"0 {label}")
    return ", ".join(parts)


def report_deltas(report: dict) -> list[FunctionDelta]:
    """An explain report's function changes, head - base, with their own-time intervals."""
    base, head = (report["profiles"][label] for label in report["sides"])
    return apply_intervals(diff_profiles(base, head), report.get("own_time_ci") or {})


def render_report(report: dict, n: int = 15) -> str:
    """Text for ``teperf explain``."""
    lines = [
        f"explain {report['cell']} (core {report['core']}, {report['repeats']} x {report['iters']} profiled "
        "steps per side)"
    ]
    labels = report["sides"]
    counters = report.get("counters") or {}
    for label, facts in (report.get("imported") or {}).items():
        lines.append("  " + side_line(label, facts))
    for label in labels:
        c = counters.get(label)
        if c:
            lines.append(
                f"  {label} counters: "
                + ", ".join(f"{k}={v}" for k, v in c.items() if v is not None and not isinstance(v, list))
            )
            if c.get("break_reasons"):
                lines.append(f"  {label} graph breaks: " + "; ".join(c["break_reasons"]))
    if len(labels) == 2:
        lines.append(f"  counters {labels[1]} - {labels[0]}: {report.get('counters_diff') or 'n/a'}")
        deltas = report_deltas(report)
        lines.append(f"  in short: {summary(deltas)}")
        if int(report.get("repeats") or 0) < 2:
            lines.append("  (one repeat: own-time changes have no interval; --repeats 3 or more gives one)")
        lines += ["", render_text(deltas, n=n)]
    else:
        rows = report["profiles"][labels[0]][:n]
        lines += ["", f"By own time (top {n}), {labels[0]}:"]
        for row in rows:
            where = row.get("rel", "?") if not row.get("line") else f"{row.get('rel')}:{row.get('line')}"
            lines.append(f"  {row['own_us']:>9.1f} us {row['calls']:>8g} calls  {row['name']}  {where}")
    for label, error in {**(report.get("errors") or {}), **(report.get("notes") or {})}.items():
        lines.append(f"  note: {label}: {error}")
    if report.get("saved_to"):
        lines.append(f"saved: {report['saved_to']}")
    return "\n".join(lines) + "\n"
