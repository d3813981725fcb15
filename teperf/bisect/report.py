"""A bisect bundle -> what ``teperf bisect`` and ``teperf report`` print (table, markdown or json)."""

from __future__ import annotations

import json
from pathlib import Path

from teperf.bisect.conclude import endpoint_text
from teperf.bisect.counters import MIN_CHANGE
from teperf.bisect.timing import MAX_DOUBLINGS, PartRow, ci_text, row_text
from teperf.bundle import Bundle
from teperf.errors import TeperfError
from teperf.explain.render import counters_diff
from teperf.records import ProbeRecord
from teperf.render import TableModel, render, render_markdown, render_rich
from teperf.sides.changes import shorten

RESULT_STYLE = {
    "moved": "bold red",
    "small": "red",
    "quiet": "green",
    "identical": "green",
    "skip": "yellow",
    "undecided": "yellow",
}


def load(path) -> tuple[dict, list[ProbeRecord]]:
    bundle = Bundle.open(path)
    meta = bundle.meta().to_dict()
    # a meta.json that says "bisect" without a bisect's commits (another kind's, edited) rendered "None..None"
    if not isinstance(meta.get("commits"), list):
        raise TeperfError(
            f"{path} says it is a bisect (meta.json kind) but names no GOOD..BAD commits: damaged, or "
            "another kind of bundle",
            "pass a bundle teperf bisect wrote, or fix meta.json's kind",
        )
    return meta, [r for r in bundle.records() if isinstance(r, ProbeRecord)]


def _commit(c: dict | None) -> str:
    return f'{c["short_sha"]} "{c["subject"][:70]}" ({c["date"][:10]})' if c else "?"


def _counter_deltas(deltas: dict | None) -> str:
    if deltas is None:
        return "counters not counted"
    return ", ".join(f"{k} {v:+g}" for k, v in deltas.items()) if deltas else "no counter moved"


def step_text(entry: dict) -> str:
    """One step in time: its own compare against its parent, its share of GOOD..BAD's, its counters."""
    row, ci = PartRow.from_dict(entry.get("row")), entry.get("share_ci")
    share = f"{entry.get('share', 0):.0%}" + (f" {_pct_ci(ci)}" if ci else "")
    return (
        f"{_commit(entry)}: {entry.get('delta_us', 0):+.1f} us{ci_text(row)} "
        f"({row.delta_pct or 0:+.1f}%) "
        f"{entry.get('verdict')} against its parent; {share} of GOOD..BAD; "
        f"{_counter_deltas(entry.get('counters'))}"
    )


def _pct_ci(ci) -> str:
    return f"[{ci[0]:.0%}, {ci[1]:.0%}]" if ci else ""


def time_text(t: dict | None) -> str:
    """What time told of a counter change point (conclude.time_share)."""
    if not t or not t.get("part"):
        return "not measured in time"
    lo, hi = t["part"]
    where = {(True, False): "GOOD..BAD", (False, True): "its own compare"}.get((t["whole"], t["own"]))
    where = where or f"part {lo}..{hi} ({hi - lo} commits)"
    low, high = t["ci_us"]
    if low is None or t.get("under") is None:
        return f"not told ({where})"
    figure = f"{where}: {t['delta_us']:+.1f} us [{low:+.1f}, {high:+.1f}] at {t['pairs']} pairs"
    of = "of GOOD..BAD's delta" if t["of"] == "GOOD..BAD" else "of the cell's time"
    if t.get("share_ci") and t["own"]:
        return f"moved, {_pct_ci(t['share_ci'])} {of} ({figure})"
    if t.get("share_ci"):
        return f"not told apart from its part, which moved: up to {t['under']:.0%} {of} ({figure})"
    return f"too small to tell at this schedule: under {t['under']:.1%} {of} ({figure})"


def entry_text(entry: dict) -> str:
    """A commit that moved the counters: its change, its share, and what time told of it (if searched)."""
    moved = counters_diff(entry.get("before"), entry.get("after")) or "?"
    text = f"{_commit(entry)}: {moved}, {entry.get('share', 0):.0%} of the counter change"
    return text + (f"; time: {time_text(entry['time'])}" if "time" in entry else "")


def small_text(entry: dict) -> str:
    """A part whose interval excludes zero, under the step size: not searched, left out of the shares."""
    row, names = PartRow.from_dict(entry.get("row")), [c["short_sha"] for c in entry.get("candidates") or []]
    what = names[0] if len(names) == 1 else f"part of {len(names)} commits ({shorten(names, shown=4)})"
    return (
        f"{what}: moved {row_text(row)}, {_pct_ci(entry.get('share_ci'))} of GOOD..BAD; under the step size, "
        "left out of the shares"
    )


def same_code_text(part: dict) -> str:
    """A part whose two ends imported identical code: settled as no change in the package."""
    names = shorten([c["short_sha"] for c in part.get("candidates") or []], shown=6)
    row = PartRow.from_dict(part.get("row"))
    figure = f" (read {row_text(row)})" if row.delta_pct is not None else ""
    return (
        f"no change in the package: {names}{figure}; both ends imported identical code, so the delta is "
        "noise and measuring again could not move it"
    )


def unresolved_text(left: dict) -> str:
    names = [c["short_sha"] for c in left.get("candidates") or []]
    row = PartRow.from_dict(left.get("row"))
    figure = f" ({row_text(row)})" if row.delta_pct is not None else ""
    if left["status"] == "skipped":
        why = "its commits could not be measured"
    elif left["status"] == "budget":
        why = "--budget was spent before it was split"
    elif row.left == "answer":
        why = "not measured again: that could not change the commits named"
    else:
        why = "its compare could not tell whether it holds a step" + (
            " within --budget" if row.left == "budget" else f", at up to {2**MAX_DOUBLINGS}x the pairs"
        )
    needed = left.get("pairs_needed")
    if needed:
        why += f"; about {needed} pairs would settle it (measured at {row.n_pairs})"
    if len(names) == 1:
        return f"{names[0]}{figure}: one commit, not told against its parent; {why}"
    return f"not narrowed to one commit{figure}: {shorten(names, shown=6)}; {why}"


def segment_text(seg: dict) -> str:
    """A segment the counter search did not narrow (search.Segment's status), with its ends' deltas."""
    names = shorten([c["short_sha"] for c in seg.get("candidates") or []], shown=6)
    why = (
        f"under {MIN_CHANGE:.0%} of GOOD's count on every counter"
        if seg["status"] == "small"
        else seg["status"]
    )
    return f"counters moved ({_counter_deltas(seg.get('deltas'))}) in {names}: not narrowed ({why})"


# the answer's sections: the result's key, its title; the JSON carries the same keys
SECTIONS = (
    ("culprits", "culprits by time, biggest share first", step_text),
    ("opposite_movers", "moved the other way in time", step_text),
    ("unconfirmed", "steps whose own verdict is not decisive (no share)", step_text),
    ("small_movers", "moved in time by less than the step size (no share)", small_text),
    ("counter_movers", "moved the counters, no step in time of their own", entry_text),
    ("counter_opposite", "moved the counters the other way", entry_text),
)


def headline(meta: dict) -> list[str]:
    result = meta.get("result") or {}
    good, bad = meta.get("good") or {}, meta.get("bad") or {}
    n = len(meta.get("commits") or [])
    probe_s, counts = result.get("counter_probe_s"), result.get("counter_probes", "?")
    budget = f" of --budget {meta['budget_s']:.0f} s" if meta.get("budget_s") else ""
    counted = "" if probe_s is None else f", {counts} counter probes of {probe_s} s (median)"
    lines = [
        f"range {good.get('short_sha') or '?'}..{bad.get('short_sha') or '?'} ({n} first-parent commits), "
        f"cell {meta.get('cell')}; {result.get('compares', result.get('probes', '?'))} compares in time "
        f"({result.get('timing_s', '?')} s{budget}){counted}; {result.get('wall_s', '?')} s in all"
    ]
    if meta.get("status") != "complete":
        lines.append(f"run status: {meta.get('status')}{': ' + meta['error'] if meta.get('error') else ''}")
    if result.get("answer"):
        lines.append(result["answer"] + (f" (exit {result['exit_code']})" if "exit_code" in result else ""))
    end = PartRow.from_dict(result.get("endpoint"))
    if end.delta_us is not None:
        lines.append(f"GOOD..BAD in time: {endpoint_text(result['endpoint'])}")
        loaded = end.verdict_cause == "load" or end.load_bound_pct is not None
        if loaded and result.get("culprits"):
            lines.append("  GOOD..BAD read under load: the shares rest on that reading")
    hint = result.get("settle") or {}
    needed, budget = hint.get("pairs_needed"), hint.get("budget_s")
    if needed:
        budget = f", about {budget} s of --budget for GOOD..BAD alone" if budget else ""
        lines.append(
            f"about {needed} pairs would settle GOOD..BAD ({needed - hint['pairs']} more; the interval "
            f"narrows as 1/sqrt(pairs)): --processes {needed}{budget}"
        )
    elif result.get("status") == "inconclusive":
        lines.append("a longer --budget or --precision may settle whether GOOD..BAD changed")
    if result.get("mode") == "counters":
        return lines + _counter_lines(result, result.get("culprits"), result.get("opposite_movers"))
    for key, title, text in SECTIONS:
        if result.get(key):
            lines.append(f"{title} ({len(result[key])}):")
            lines += [f"  {text(e)}" for e in result[key]]
    rest = result.get("rest")
    if rest:
        within = result.get("steps_within_interval")
        lines.append(
            f"unexplained: {rest['delta_us']:+.1f} us ({rest['share']:.0%} of GOOD..BAD); the confirmed "
            f"steps add up to {result.get('steps_us', 0):+.1f} us"
            + ("" if within is None else f", {'inside' if within else 'outside'} GOOD..BAD's interval")
        )
    lines += [unresolved_text(left) for left in result.get("unresolved") or []]
    lines += [same_code_text(part) for part in result.get("same_code") or []]
    segments = result.get("counter_unresolved") or []
    if segments:
        lines.append(f"counter segments not narrowed to one commit ({len(segments)}):")
        lines += [f"  {segment_text(seg)}" for seg in segments]
    # a bundle from before counter_movers: its counter change points as they were listed
    old = result.get("counter_changes") if "counter_movers" not in result else []
    return lines + _counter_lines(dict(result, totals=result.get("counter_totals")), old, [])


def _counter_lines(result: dict, changes, opposite) -> list[str]:
    """--no-confirm's answer (the commits that moved the counters, each way); GOOD -> BAD's counters."""
    lines = []
    by = next(iter(result.get("totals") or {"counters": 0}))
    for title, entries in (
        (f"commits that moved the counters, by {by}", changes),
        ("moved the counters the other way", opposite),
    ):
        if entries:
            lines.append(f"{title} ({len(entries)}):")
            lines += [f"  {entry_text(e)}" for e in entries]
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
    """The biggest culprit's own compare, rendered (a table: printed under its title); None if not run."""
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
    keys = "answer outcome exit_code explained endpoint settle settle_parts budget_spent".split()
    out = {key: result.get(key) for key in keys}
    # every section the text shows, the same keys; counter_changes: every counter change point found
    listed = "counter_changes unresolved same_code counter_unresolved rest".split()
    for key in [k for k, *_ in SECTIONS] + listed:
        out[key] = result.get(key) or ([] if key != "rest" else None)
    out.update(meta=meta, probes=[p.to_dict() for p in probes])
    confirm = _confirmed(meta, path, "json")
    if confirm is not None:
        out["confirm"] = json.loads(confirm)
    return json.dumps(out, indent=2, default=str) + "\n"


def _markdown(meta: dict, probes: list, path, console=None) -> str:
    text, confirm = render_markdown(probe_model(meta, probes, path)), _confirmed(meta, path, "markdown")
    title = "\n**the biggest culprit's own compare against its parent**\n\n"
    return text if confirm is None else text + title + confirm


def _table(meta: dict, probes: list, path, console=None) -> None:
    render_rich(probe_model(meta, probes, path), console)
    _confirmed(meta, path, "table", console)


RENDERERS = {"table": _table, "markdown": _markdown, "json": _json}  # fmt -> fn(meta, probes, path, console)


def render_bisect(path, fmt: str, console=None) -> str | None:
    """Text of a bisect bundle; with fmt 'table' printed on ``console`` (returns None)."""
    meta, probes = load(path)
    return RENDERERS[fmt](meta, probes, path, console)
