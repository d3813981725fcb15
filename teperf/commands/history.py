"""teperf history: the nightly series of one or all cells, as a table, CSV or JSON."""

from __future__ import annotations

import functools
import json
import sys

import click

from teperf.commands._common import format_option, print_table, side_options, take_measure, take_sides
from teperf.errors import TeperfError
from teperf.numbers import missing
from teperf.records import CELL_KEY
from teperf.safe_text import for_terminal
from teperf.verdicts import HISTORY_STYLE

history_option = click.option(
    "--history",
    "history_url",
    metavar="DIR|URL",
    envvar="TEPERF_HISTORY",
    help="History store: a directory or fsspec URL (default: $TEPERF_HISTORY or results/history).",
)


def open_store(url):
    from teperf.history.store import HistoryStore

    return HistoryStore(url)


def read_history(store, ref: str | None = None):
    """The store's rows (of ``ref``); a file it had to skip is one teperf line on stderr, not a Python
    warning. A ``ref`` no row has, in a history that has rows, is refused naming the refs it has: else a
    typo reads as an empty history."""
    df = store.read()
    warn_unreadable(store)
    if ref is None:
        return df
    mine = df[df["ref"] == ref].reset_index(drop=True)
    if mine.empty and not df.empty:
        refs = sorted(str(r) for r in df["ref"].dropna().unique())
        raise TeperfError(
            f"--ref {ref} matches no row of the history at {store.url}",
            f"use one of its refs ({', '.join(refs) or 'none recorded'}), or leave --ref out",
        )
    return mine


def warn_unreadable(store) -> None:
    for what in store.unreadable:
        line = f"teperf: warning: skipped an unreadable history file: {what}; move it out of the history"
        click.echo(for_terminal(line), err=True)


def select_machine(df, machine: str | None):
    """Filter by machine fingerprint (a unique prefix is enough) or by a text in its label."""
    if not machine or df.empty:
        return df
    ids = sorted(df["machine"].dropna().unique())
    labels = df.drop_duplicates("machine").set_index("machine")["machine_label"].to_dict()
    hits = [m for m in ids if m.startswith(machine)]
    if not hits:
        hits = [m for m in ids if machine.lower() in str(labels.get(m, "")).lower()]
    if len(hits) != 1:
        known = ", ".join(f"{m} ({lbl})" for m, lbl in labels.items())
        what = "matches no machine" if not hits else "matches several machines"
        raise TeperfError(f"--machine {machine!r} {what}", f"use one of: {known}")
    return df[df["machine"] == hits[0]]


def explain_new(history_url, sides, measure, total_s=None) -> list:
    """history_bisect.explain_changes, said on stderr; a Ctrl-C exits 130 (what was explained is stored)."""
    from teperf.errors import Interrupted
    from teperf.history_bisect import explain_changes

    try:
        return explain_changes(history_url, sides, measure, functools.partial(click.echo, err=True), total_s)
    except Interrupted as stop:
        click.echo(f"teperf: interrupted; the bisect's bundle keeps its probes: {stop.path}", err=True)
        sys.exit(130)


@click.command("history")
@history_option
@click.option("--module", help="Only this module.")
@click.option("--recipe", help="Only this recipe.")
@click.option("--machine", help="Only this machine (fingerprint prefix, or text in its CPU/GPU label).")
@click.option("--ref", help="Only nightlies of this branch.")
@click.option("--changes", is_flag=True, help="List the detected changes instead of the points.")
@click.option(
    "--nights",
    "list_nights",
    is_flag=True,
    help="List the nights instead of the points: which shards each had, complete or not.",
)
@format_option(("table", "csv", "json"))
@click.option(
    "--last", type=click.IntRange(min=1), metavar="N", help="Only the newest N commits of each cell."
)
@click.option(
    "--explain",
    is_flag=True,
    help="With --changes: first bisect each change point of this machine not yet explained, between the "
    "nights around it (needs --repo and a --config with its cell), and store its culprits.",
)
@side_options("history", "repo", "strategy", "package")  # what --explain's bisects need
@click.option("--config", "config_path", metavar="FILE|NAME", help="With --explain: the config.")
@click.option(
    "--budget",
    "budget_s",
    metavar="DURATION",
    help="With --explain: each bisect's budget for compares (default 30m).",
)
@click.option("--results-dir", metavar="DIR", help="With --explain: where the bisect bundles go.")
def command(history_url, module, recipe, machine, ref, changes, list_nights, fmt, last, explain, **bisect):
    """Show the nightly history (one row per commit and cell).

    A night split into shards is one night: its rows come from every shard, and a night with
    a shard missing or not complete is marked incomplete ("2 of 3 shards (missing 3/3)").

    \b
    teperf history --module Linear --recipe bf16
    teperf history --format csv > history.csv
    teperf history --changes
    teperf history --nights
    """
    from teperf.history.nights import by_key, nights, status_column
    from teperf.history.store import ordered

    if changes and list_nights:  # each replaces the points: one would be silently dropped
        raise TeperfError("--changes and --nights each list something else", "give one of them")
    if explain:
        if not changes:
            raise TeperfError("--explain explains the change points", "add --changes")
        # takes --config, --budget and --results-dir
        measure = take_measure(bisect, "nightly", budget_plans=False)
        explain_new(history_url, take_sides(bisect), measure)
    else:  # the bisects' options mean nothing without them: say so rather than drop them
        flags = {"config_path": "--config", "budget_s": "--budget", "results_dir": "--results-dir"}
        if given := [flag for key, flag in flags.items() if bisect.get(key) is not None]:
            fix = f"add --changes --explain, or drop {given[0]}"
            raise TeperfError(f"{given[0]} is for --explain's bisects, which this command does not run", fix)
    store = open_store(history_url)
    df = select_machine(read_history(store, ref=ref), machine)
    found = nights(df)  # from every cell: a --module filter must not make a night look short of shards
    for col, val in (("module", module), ("recipe", recipe)):
        if val is not None:
            df = df[df[col] == val]
    if df.empty:
        given = ", ".join(f"{k}={v}" for k, v in (("module", module), ("recipe", recipe), ("ref", ref)) if v)
        fix = "run teperf nightly or teperf import BUNDLE first, or check --history and the filters"
        raise TeperfError(f"no history{' matching ' + given if given else ''} in {store.url}", fix)
    if list_nights:
        return _print_nights(found, fmt)
    if changes:
        return _print_changes(df, fmt, store.explanations())
    df = ordered(df)
    if last:
        keep = []
        for _, g in df.groupby(["machine", *CELL_KEY], dropna=False, sort=False):
            shas = list(dict.fromkeys(g["sha"].fillna(g["run_id"])))[-last:]
            keep.append(g[g["sha"].fillna(g["run_id"]).isin(shas)])
        import pandas as pd

        df = ordered(pd.concat(keep))
    df = df.assign(night_status=status_column(df, found))
    df = _with_explanations(df, store.explanations(), text=fmt == "csv")
    if fmt == "csv":
        sys.stdout.write(df.to_csv(index=False))
    elif fmt == "json":
        click.echo(df.to_json(orient="records", date_format="iso", indent=1))
    else:
        print_table(
            "date|commit|subject|cell|host us|night %|95% CI %|verdict|shards|machine",
            _point_rows(df, by_key(found)),
            right=("host us", "night %"),
        )
        shown = set(zip(df["machine"], df["night"]))
        for n in found:
            if not n.complete and (n.machine, n.night) in shown:
                click.echo(night_line(n))


def night_line(n) -> str:
    """An incomplete night, as history and dashboard print it under their output."""
    return f"night {n.night} ({n.short_sha or 'no commit'}) on machine {n.machine}: {n.describe()}"


def _point_rows(df, night_of: dict):
    for r in df.itertuples(index=False):
        date = r.committed_at if r.committed_at is not None and str(r.committed_at) != "NaT" else r.run_date
        has_ci = not missing(r.ci_low_pct) and not missing(r.ci_high_pct)
        ci = f"[{r.ci_low_pct:+.1f}, {r.ci_high_pct:+.1f}]" if has_ci else ""
        verdict = _s(r.verdict) or (_s(r.status) if r.status != "ok" else "")
        cause = " (load)" if _s(r.verdict_cause) == "load" else ""
        yield (
            str(date)[:16],
            _s(r.sha)[:10],
            _s(r.subject)[:50],
            f"{_s(r.module)} {_s(r.recipe)} {_s(r.shape)}",
            f"{r.host_us:.1f}" if not missing(r.host_us) else "-",
            f"{r.delta_pct:+.1f}" if not missing(r.delta_pct) else "",
            ci,
            (verdict + cause, HISTORY_STYLE.get(verdict, "")),
            _shards_text(night_of.get((r.machine, r.night))),
            _s(r.machine),
        )


def _shards_text(night):
    """The night's shards for a table cell: '3 of 3' quietly, an incomplete night loudly."""
    if night is None:
        return ""
    text = f"{night.done} of {night.count}"
    return (text, "dim") if night.complete else (text + " !", "bold red")


def _emit_records(rows: list[dict], fmt: str, csv_rows: list[dict]) -> bool:
    """Print ``rows`` as JSON or ``csv_rows`` (they flattened) as CSV; False for the table format."""
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return True
    if fmt == "csv":
        import csv

        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["machine"])
        w.writeheader()
        w.writerows(csv_rows)
        return True
    return False


def _print_nights(found, fmt: str) -> None:
    rows = [
        {
            "machine": n.machine,
            "machine_label": n.machine_label,
            "night": n.night,
            "ref": n.ref,
            "commit": n.short_sha,
            "subject": n.subject,
            "started": n.started.isoformat() if n.started else None,
            "shards": n.count,
            "done": n.done,
            "missing": [f"{i}/{n.count}" for i in n.missing],
            "not_complete": {f"{i}/{n.count}": st for i, st in n.not_complete},
            "complete": n.complete,
            "status": n.describe(),
        }
        for n in found
    ]
    flat = [
        {
            **r,
            "missing": " ".join(r["missing"]),
            "not_complete": " ".join(f"{k}:{v}" for k, v in r["not_complete"].items()),
        }
        for r in rows
    ]
    if _emit_records(rows, fmt, flat):
        return
    print_table(
        "started|night|commit|subject|shards|machine",
        (
            (
                (r["started"] or "")[:16],
                r["night"],
                r["commit"],
                (r["subject"] or "")[:40],
                (r["status"], "" if r["complete"] else "bold red"),
                r["machine"],
            )
            for r in rows
        ),
    )


def _s(v) -> str:
    """An optional string column's value: missing (None, NaN) reads as ''."""
    return v if isinstance(v, str) else ""


def _print_changes(df, fmt: str, explained: dict) -> None:
    from teperf.history.analysis import analyze
    from teperf.history.explain import as_dict, explanation_of

    rows = [
        {
            **{k: getattr(cell, k) for k in ("machine", *CELL_KEY)},
            "kind": ch.kind,
            "direction": ch.direction,
            "size_us": round(ch.delta_us, 3),
            "size_pct": round(ch.delta_pct, 3),
            "first_bad_sha": ch.first_bad.sha,
            "first_bad_subject": ch.first_bad.subject,
            "last_good_sha": ch.last_good.sha if ch.last_good else None,
            "last_good_subject": ch.last_good.subject if ch.last_good else None,
            "found_by": "levels" if ch.paired is None else "paired compare",
            "ci_pct": [ch.paired.ci_low_pct, ch.paired.ci_high_pct] if ch.paired else None,
            "pvalue": ch.pvalue,
            "explanation": as_dict(explanation_of(cell, ch, explained)),
        }
        for cell in analyze(df)
        for ch in cell.changes
    ]
    flat = [{**r, "explanation": (r["explanation"] or {}).get("answer")} for r in rows]
    if _emit_records(rows, fmt, flat):
        return
    if not rows:
        click.echo("no changes detected")
        return
    print_table(
        "cell|change|size|last good|first bad|culprits|machine",
        (
            (
                f"{r['module']} {r['recipe']} {r['shape']}",
                (f"{r['kind']} {r['direction']}", HISTORY_STYLE[r["direction"]]),
                f"{r['size_us']:+.1f} us ({r['size_pct']:+.1f}%)",
                f"{(r['last_good_sha'] or '-')[:10]} {(r['last_good_subject'] or '')[:40]}",
                f"{(r['first_bad_sha'] or '-')[:10]} {(r['first_bad_subject'] or '')[:40]}",
                _culprits_text(r["explanation"]),
                r["machine"],
            )
            for r in rows
        ),
    )


def _with_explanations(df, explained: dict, text: bool):
    """The explanation of the change point whose BAD night a point is (CSV: its answer); no column when
    nothing is explained, so such a history reads as before."""
    from teperf.history.explain import as_dict

    if not explained or df.empty:
        return df
    cell = ("machine", *CELL_KEY)
    by_bad = {(*(getattr(r, c) for c in cell), r.bad_sha): as_dict(r) for r in explained.values()}
    found = [by_bad.get(k) for k in zip(*(df[c].fillna("") for c in (*cell, "sha")))]
    return df.assign(explanation=[(e or {}).get("answer") if text else e for e in found])


def _culprits_text(explanation: dict | None) -> str:
    """'abc1234 87% [70%, 104%]' per culprit, or what the bisect said; '' if not asked."""
    if not explanation:
        return ""
    if not explanation["culprits"]:
        return explanation["answer"]
    parts = []
    for c in explanation["culprits"]:
        ci = c.get("share_ci")
        parts.append(f"{c['short_sha']} {c['share']:.0%}" + (f" [{ci[0]:.0%}, {ci[1]:.0%}]" if ci else ""))
    return ", ".join(parts)
