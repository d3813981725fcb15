"""teperf import: add existing result bundles to the nightly history."""

from __future__ import annotations

import re

import click

from teperf.commands.history import history_option, open_store
from teperf.errors import TeperfError
from teperf.nightly import parse_shard


@click.command("import")
@click.argument("bundles", nargs=-1, required=True, type=click.Path(), metavar="BUNDLE...")
@history_option
@click.option("--ref", help="Branch name to record (default: the measured side's ref).")
@click.option("--shard", metavar="I/N", help="Which slice of a split night the bundle is (default 1/1).")
@click.option("--sha", help="Commit to record, for a bundle whose side has no git description.")
@click.option("--subject", help="Commit subject to record with --sha.")
@click.option("--commit-date", metavar="ISO", help="Commit date to record with --sha (ISO 8601).")
@click.option(
    "--include-partial",
    is_flag=True,
    help="Also add bundles of runs that did not finish (interrupted, running).",
)
def command(bundles, history_url, ref, shard, sha, subject, commit_date, include_partial):
    """Add result bundles (from teperf run/compare/nightly) to the history.

    Importing a bundle twice adds it once.

    \b
    teperf import results/20250101-020000-compare-ab12 --history results/history
    """
    from teperf.api import summarize
    from teperf.history.store import _ts, measured_sides

    i, n = parse_shard(shard)
    if (subject or commit_date) and not sha:
        raise TeperfError("--subject/--commit-date need --sha", "give the commit with --sha too")
    if commit_date is not None and _ts(commit_date) is None:
        fix = "write it like 2025-04-30 or 2025-04-30T10:00:00Z"
        raise TeperfError(f"--commit-date {commit_date!r} is not an ISO 8601 date", fix)
    if sha is not None and not re.fullmatch(r"[0-9a-fA-F]{4,64}", sha):
        fix = "give the commit's hex SHA (4 to 40 hex digits; git rev-parse REF prints it)"
        raise TeperfError(f"--sha {sha!r} is not a commit hash", fix)
    if sha and len(bundles) > 1:
        fix = "import them one at a time with their own --sha"
        raise TeperfError("--sha names one commit, but several bundles were given", fix)
    store = open_store(history_url)
    overrides = dict(sha=sha, subject=subject, committed_at=commit_date) if sha else {}
    added = skipped = 0
    for path in bundles:
        summary = summarize(path)
        for note in getattr(summary, "notes", None) or []:
            if note.startswith("skipped "):  # a damaged bundle: say what was left out
                click.echo(f"{path}: {note}", err=True)
        status = summary.meta.status
        partial = sum(r.status == "partial" for r in summary.rows)  # e.g. records.jsonl cut short
        why = f"run status {status!r}" if status in ("running", "interrupted") else ""
        why = why or (f"{partial} of {len(summary.rows)} cells partial" if partial else "")
        if why and not include_partial:
            click.echo(f"skipped {path}: {why} (use --include-partial to add it anyway)", err=True)
            skipped += 1
            continue
        file, new = store.add_summary(
            summary, run_kind="import", ref=ref, shard=f"{i}/{n}", bundle=str(path), overrides=overrides
        )
        if new:
            added += 1
            # a bundle of paths or interpreters has no commit: say so, as the history shows none
            no_commit = ""
            if not (sha or measured_sides(summary.meta)[0].get("sha")):
                no_commit = "; no commit recorded (its sides are not git refs): --sha gives one"
            click.echo(f"added {path} -> {file} ({len(summary.rows)} cells{no_commit})")
        else:
            skipped += 1
            click.echo(f"already in the history: {path} ({file})")
    click.echo(f"{added} bundle{'s' if added != 1 else ''} added to {store.url}, {skipped} skipped")
