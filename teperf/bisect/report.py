"""A bisect bundle -> what ``teperf bisect`` and ``teperf report`` print (table, markdown or json)."""

from __future__ import annotations

import json
from pathlib import Path

from teperf.bisect.timing import ci_text
from teperf.bundle import Bundle
from teperf.explain.render import counters_diff
from teperf.records import ProbeRecord
from teperf.render import TableModel, render, render_markdown, render_rich
from teperf.sides.changes import shorten

# a probe's result: the time search's part states, a skipped commit
RESULT_STYLE = {"moved": "bold red", "quiet": "green", "skip": "yellow", "undecided": "yellow"}


def load(path) -> tuple[dict, list[ProbeRecord]]:
    bundle = Bundle.open(path)
    return bundle.meta().to_dict(), [r for r in bundle.records() if isinstance(r, ProbeRecord)]


def _commit(c: dict | None) -> str:
    if not c:
        return "?"
    return f'{c["short_sha"]} "{c["subject"][:70]}" ({c["date"][:10]})'


def _counter_deltas(deltas: dict | None) -> str:
    if deltas is None:
        return "counters not counted"
    if not deltas:
        return "no counter moved"
    return ", ".join(f"{k} {v:+g}" for k, v in deltas.items())


def step_text(entry: dict) -> str:
    """One step in time: its own compare against its parent, its share of GOOD..BAD's, its counters."""
    row = entry.get("row") or {}
    share = f"{entry.get('share', 0):.0%}"
    if entry.get("share_ci"):
        share += f" [{entry['share_ci'][0]:.0%}, {entry['share_ci'][1]:.0%}]"
    return (
        f"{_commit(entry)}: {entry.get('delta_us', 0):+.1f} us{ci_text(row)} "
        f"({row.get('delta_pct') or 0:+.1f}%) "
        f"{entry.get('verdict')} against its parent; {share} of GOOD..BAD; "
        f"{_counter_deltas(entry.get('counters'))}"
    )


def entry_text(entry: dict) -> str:
    """A commit that moved the counters: its change and its share of GOOD..BAD's counter change."""
    moved = counters_diff(entry.get("before"), entry.get("after")) or "?"
    return f"{_commit(entry)}: {moved}, {entry.get('share', 0):.0%} of the counter change"


def headline(meta: dict) -> list[str]:
    result = meta.get("result") or {}
    good, bad = meta.get("good") or {}, meta.get("bad") or {}
    n = len(meta.get("commits") or [])
    probe_s = result.get("counter_probe_s")
    lines = [
        f"range {good.get('short_sha')}..{bad.get('short_sha')} ({n} first-parent commits), "
        f"cell {meta.get('cell')}; {result.get('compares', result.get('probes', '?'))} compares in time "
        f"({result.get('timing_s', '?')} s)"
        + (
            f", {result.get('counter_probes', '?')} counter probes of {probe_s} s (median)"
            if probe_s is not None
            else ""
        )
        + f"; {result.get('wall_s', '?')} s in all"
    ]
    if meta.get("status") != "complete":
        lines.append(f"run status: {meta.get('status')}{': ' + meta['error'] if meta.get('error') else ''}")
    if result.get("answer"):
        lines.append(result["answer"])
    end = result.get("endpoint")
    if end and end.get("delta_us") is not None:
        lines.append(
            f"GOOD..BAD in time: {end['delta_us']:+.1f} us{ci_text(end)} ({end.get('delta_pct') or 0:+.1f}%) "
            f"{end.get('verdict')}"
        )
    if result.get("mode") == "counters":
        return lines + _counter_lines(result, result.get("culprits"), result.get("opposite_movers"))
    groups = (
        ("culprits by time, biggest share first", result.get("culprits")),
        ("moved the other way", result.get("opposite_movers")),
        ("steps whose own verdict is not decisive (no share)", result.get("unconfirmed")),
    )
    for title, entries in groups:
        if entries:
            lines.append(f"{title} ({len(entries)}):")
            lines += [f"  {step_text(e)}" for e in entries]
    rest = result.get("rest")
    if rest:
        within = result.get("steps_within_interval")
        lines.append(
            f"unexplained: {rest['delta_us']:+.1f} us ({rest['share']:.0%} of GOOD..BAD); the confirmed "
            f"steps add up to {result.get('steps_us', 0):+.1f} us"
            + ("" if within is None else f", {'inside' if within else 'outside'} GOOD..BAD's interval")
        )
    for left in result.get("unresolved") or []:
        why = {"skipped": "its commits could not be measured", "budget": "--budget was spent"}.get(
            left["status"], "its halves could not be told apart within --budget"
        )
        names = shorten([c["short_sha"] for c in left.get("candidates") or []], shown=6)
        delta = f" ({left['delta_us']:+.1f} us)" if left.get("delta_us") is not None else ""
        lines.append(f"not narrowed to one commit{delta}: {names}; {why}")
    if result.get("status") == "inconclusive":
        lines.append("a longer --budget or --precision may settle whether GOOD..BAD changed")
    return lines + _counter_lines(result, result.get("counter_changes"), [])


def _counter_lines(result: dict, changes, opposite) -> list[str]:
    lines = []
    if changes:
        lines.append(
            f"commits that moved the counters ({len(changes)}), by "
            f"{next(iter(result.get('counter_totals') or result.get('totals') or {'counters': 0}))}:"
        )
        lines += [f"  {entry_text(e)}" for e in changes]
    if opposite:
        lines.append("moved the counters the other way:")
        lines += [f"  {entry_text(e)}" for e in opposite]
    if result.get("moved_counters"):
        diff = counters_diff(result.get("counters_good"), result.get("counters_bad"))
        lines.append(f"counters GOOD -> BAD: {diff}")
    return lines


def probe_model(meta: dict, probes: list[ProbeRecord], path) -> TableModel:
    rows, styles = [], []
    for p in probes:
        measured = p.what
        if p.counters:
            measured += f" ({p.counters.get('python_calls')} py calls)"
        if p.extra.get("processes"):
            measured += f" ({p.extra['processes']} pairs)"
        subject, detail, seconds = (p.subject or "")[:50], (p.detail or "")[:90], f"{p.seconds or 0:.1f}"
        rows.append([p.role, p.short_sha or "?", subject, p.tier or "", measured, p.result, detail, seconds])
        styles.append(RESULT_STYLE.get(p.result))
    plan = meta.get("plan") or {}
    footer = [
        f"plan: {plan.get('expected_probes')} probes per change point; tiers {plan.get('tiers')}; "
        f"about {plan.get('counters_s')} s (counters, one change point) / {plan.get('timing_s')} s per step "
        "in time",
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


def _confirmed(meta: dict, path, fmt: str, console=None):
    """The biggest culprit's own compare against its parent, rendered (a table printed on ``console``
    under its title); None where it was not run."""
    from teperf.summary import summarize

    culprits = (meta.get("result") or {}).get("culprits") or [{}]
    rel = (culprits[0].get("row") or {}).get("bundle")
    if not rel or not (Path(path) / rel).is_dir():
        return None
    if fmt == "table":
        console.print("\nthe biggest culprit's own compare against its parent", highlight=False)
    return render(summarize(Path(path) / rel), fmt, console=console)


def _json(meta: dict, probes: list, path, console=None) -> str:
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
    confirm = _confirmed(meta, path, "json")
    if confirm is not None:
        out["confirm"] = json.loads(confirm)
    return json.dumps(out, indent=2, default=str) + "\n"


def _markdown(meta: dict, probes: list, path, console=None) -> str:
    text = render_markdown(probe_model(meta, probes, path))
    confirm = _confirmed(meta, path, "markdown")
    if confirm is not None:
        text += "\n**the biggest culprit's own compare against its parent**\n\n" + confirm
    return text


def _table(meta: dict, probes: list, path, console=None) -> None:
    render_rich(probe_model(meta, probes, path), console)
    _confirmed(meta, path, "table", console)


RENDERERS = {"table": _table, "markdown": _markdown, "json": _json}  # fmt -> fn(meta, probes, path, console)


def render_bisect(path, fmt: str, console=None) -> str | None:
    """Text of a bisect bundle; with fmt 'table' printed on ``console`` (returns None)."""
    meta, probes = load(path)
    return RENDERERS[fmt](meta, probes, path, console)
