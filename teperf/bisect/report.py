"""A bisect bundle -> what ``teperf bisect`` and ``teperf report`` print (table, markdown or json).

The probe log is a render.TableModel, laid out by the same renderers as
compare's table; the confirming compare is its own bundle, rendered as such.
"""

from __future__ import annotations

import json
from pathlib import Path

from teperf.bundle import Bundle
from teperf.explain import COUNTER_LABELS, counters_diff
from teperf.records import ProbeRecord
from teperf.render import TableModel, render, render_markdown, render_rich

RESULT_STYLE = {
    "bad": "bold red",
    "good": "green",
    "skip": "yellow",
    "undecided": "yellow",
    "between": "bold red",
    "slower": "bold red",
    "faster": "bold green",
}


def load(path) -> tuple[dict, list[ProbeRecord]]:
    bundle = Bundle.open(path)
    return bundle.meta().to_dict(), [r for r in bundle.records() if isinstance(r, ProbeRecord)]


def _commit(c: dict | None) -> str:
    if not c:
        return "?"
    return f'{c["short_sha"]} "{c["subject"][:70]}" ({c["date"][:10]})'


def counter_text(before: dict | None, after: dict | None) -> str:
    """'python_calls 34 -> 39 (+5), aten_ops 44 -> 44, ...' for the counters measured on either side."""
    if not before or not after:
        return ""
    parts = []
    for key, *_ in COUNTER_LABELS:
        b, a = before.get(key), after.get(key)
        if b is None and a is None:
            continue
        change = "" if b is None or a is None or a == b else f" ({a - b:+d})"
        parts.append(f"{key} {b} -> {a}{change}")
    return ", ".join(parts)


def entry_text(entry: dict) -> str:
    """One culprit (or opposite mover): commit, its change, its share of GOOD..BAD's, its own compare."""
    if "time_pct" in (entry.get("deltas") or {}):
        moved = f"{entry['deltas']['time_pct']:+.1f}% of GOOD's time"
    else:
        moved = counters_diff(entry.get("before"), entry.get("after")) or "?"
    text = f"{_commit(entry)}: {moved}, {entry.get('share', 0):.0%} of the change"
    row = (entry.get("confirm") or {}).get("row") or {}
    if row.get("delta_pct") is not None:
        ci = ""
        if row.get("ci_low_pct") is not None:
            ci = f" (CI [{row['ci_low_pct']:+.1f}, {row['ci_high_pct']:+.1f}%])"
        text += f"; against its parent {row['delta_pct']:+.1f}%{ci} {row.get('verdict')}"
    elif entry.get("confirm"):
        text += f"; against its parent: {entry['confirm'].get('error') or row.get('error') or 'failed'}"
    return text


def headline(meta: dict) -> list[str]:
    result = meta.get("result") or {}
    good, bad = meta.get("good") or {}, meta.get("bad") or {}
    n = len(meta.get("commits") or [])
    lines = [
        f"range {good.get('short_sha')}..{bad.get('short_sha')} ({n} first-parent commits), "
        f"cell {meta.get('cell')}; searched on {result.get('mode', '?')}; {result.get('probes', '?')} probes "
        f"(expected {meta.get('plan', {}).get('expected_probes')} per change point), "
        f"{result.get('wall_s', '?')} s"
    ]
    status = result.get("status")
    if meta.get("status") != "complete":
        lines.append(f"run status: {meta.get('status')}{': ' + meta['error'] if meta.get('error') else ''}")
    if result.get("answer"):
        lines.append(result["answer"])
    culprits = result.get("culprits") or []
    if result.get("culprit"):
        lines.append(f"culprit: {_commit(result.get('culprit'))}, {result['culprit']['sha']}")
        lines.append(f"parent:  {_commit(result.get('parent'))}")
    if len(culprits) > 1 or (culprits and result.get("opposite_movers")):
        lines.append(f"culprits, biggest share first ({len(culprits)}):")
        lines += [f"  {entry_text(e)}" for e in culprits]
    if result.get("opposite_movers"):
        lines.append("moved the other way (not culprits):")
        lines += [f"  {entry_text(e)}" for e in result["opposite_movers"]]
    if status == "no change":
        lines.append("no counter differs and GOOD..BAD is 'no change' in time: nothing to bisect")
    elif status == "inconclusive":
        lines.append(
            "no counter differs, and whether GOOD..BAD changed in time could not be told within --budget "
            "(see its interval below): nothing to bisect on; a longer --budget or --precision may settle it"
        )
    unresolved = result.get("unresolved")
    if unresolved is None and status in ("skipped", "undecided"):  # a bundle of before several changes
        unresolved = [
            {"status": status, "candidates": result.get("candidates"), "parent": result.get("last_good")}
        ]
    for left in unresolved or []:
        why = (
            "could not be measured" if left["status"] == "skipped" else "could not be decided within --budget"
        )
        cands = ", ".join(c["short_sha"] for c in left.get("candidates") or [])
        lines.append(
            f"not narrowed to one commit (a probe {why}): a change is in one of {cands}; "
            f"last good {_commit(left.get('parent'))}"
        )
    if result.get("moved_counters"):
        diff = counters_diff(result.get("counters_good"), result.get("counters_bad"))
        lines.append(f"counters GOOD -> BAD: {diff}")
    before_after = counter_text(result.get("counters_before"), result.get("counters_after"))
    if before_after:
        lines.append(f"counters at the parent -> the culprit: {before_after}")
    end = result.get("endpoint")
    if end and end.get("delta_pct") is not None:
        lines.append(
            f"GOOD..BAD in time: {end['delta_pct']:+.1f}% (CI [{end.get('ci_low_pct') or 0:+.1f}, "
            f"{end.get('ci_high_pct') or 0:+.1f}%]) {end.get('verdict')}"
        )
    elif end and end.get("error"):
        lines.append(f"GOOD..BAD in time: not compared ({end['error']})")
    cover = result.get("coverage")
    if cover:
        lines.append(
            f"confirmed in time: {', '.join(cover['confirmed']) or 'none'} of {', '.join(cover['tried'])}: "
            f"{cover['confirmed_us']:+.1f} us of GOOD..BAD's {cover['endpoint_us']:+.1f} us "
            + (
                f"({cover['covered_pct']:.0f}% covered, {100 - cover['covered_pct']:.0f}% unexplained)"
                if cover["covered_pct"] <= 100
                else f"({cover['covered_pct']:.0f}%: more than all of it; commits that moved the other way, "
                "or the intervals' width)"
            )
            + ("; the rest not compared within --budget" if result.get("confirm_stopped") else "")
        )
    return lines


def probe_model(meta: dict, probes: list[ProbeRecord], path) -> TableModel:
    rows, styles = [], []
    for p in probes:
        measured = p.what
        if p.counters:
            measured += f" ({p.counters.get('python_calls')} py calls)"
        if p.extra.get("processes"):
            measured += f" ({p.extra['processes']} pairs)"
        rows.append(
            [
                p.role,
                p.short_sha or "?",
                (p.subject or "")[:50],
                p.tier or "",
                measured,
                p.result,
                (p.detail or "")[:90],
                f"{p.seconds or 0:.1f}",
            ]
        )
        styles.append(RESULT_STYLE.get(p.result))
    plan = meta.get("plan") or {}
    footer = [
        f"plan: {plan.get('expected_probes')} probes per change point; tiers {plan.get('tiers')}; "
        f"about {plan.get('counters_s')} s (counters, one change point) / {plan.get('timing_s')} s (timing)"
        + (
            f"; measured {plan['measured']['probe_s']} s per counter probe"
            if (plan.get("measured") or {}).get("probe_s") is not None
            else ""
        ),
        f"bundle: {path}",
    ]
    return TableModel(
        title="teperf bisect",
        header=headline(meta),
        columns=["role", "commit", "subject", "tier", "measured", "result", "detail", "s"],
        rows=rows,
        styles=styles,
        footer=footer,
        numeric=("s",),
    )


def confirm_path(meta: dict, path) -> Path | None:
    rel = ((meta.get("result") or {}).get("confirm") or {}).get("bundle")
    return Path(path) / rel if rel else None


def render_bisect(path, fmt: str, console=None) -> str | None:
    """Text of a bisect bundle; with fmt 'table' printed on ``console`` (returns None)."""
    from teperf.summary import summarize

    meta, probes = load(path)
    confirm = confirm_path(meta, path)
    if fmt == "json":
        result = meta.get("result") or {}
        out = {
            "answer": result.get("answer"),
            "explained": result.get("explained"),
            "culprits": result.get("culprits") or [],  # biggest share first
            "opposite_movers": result.get("opposite_movers") or [],
            "unresolved": result.get("unresolved") or [],
            "meta": meta,
            "probes": [p.to_dict() for p in probes],
        }
        if confirm and confirm.is_dir():
            out["confirm"] = json.loads(render(summarize(confirm), "json"))
        return json.dumps(out, indent=2, default=str) + "\n"
    model = probe_model(meta, probes, path)
    if fmt == "markdown":
        text = render_markdown(model)
        if confirm and confirm.is_dir():
            text += "\n**confirming compare: the culprit against its parent**\n\n"
            text += render(summarize(confirm), "markdown")
        return text
    render_rich(model, console)
    if confirm and confirm.is_dir():
        console.print("\nconfirming compare: the culprit against its parent", highlight=False)
        render(summarize(confirm), "table", console=console)
    return None
