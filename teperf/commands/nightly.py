"""teperf nightly: measure a branch's head against the previous nightly's commit, append to the history.
It parses and prints: teperf.api does the work, teperf/nightly.py the decisions (plain, testable)."""

from __future__ import annotations

import functools
import json
import sys
import time

import click

from teperf.commands._common import (
    EXIT_STATUS_HELP,
    config_options,
    counters_option,
    emit,
    fail_on_option,
    gate,
    grouped,
    output_options,
    side_options,
    sweep_option,
)
from teperf.commands._live import live_view
from teperf.commands.history import explain_new, history_option, warn_unreadable
from teperf.errors import EXIT_CELLS_FAILED, TeperfError, exit_status_for_signal
from teperf.nightly import DEFAULT_CONFIG, NightlyInterrupted
from teperf.options import MeasureOptions, SideOptions
from teperf.safe_text import for_terminal

_log = functools.partial(click.echo, err=True)


@click.command("nightly", epilog=EXIT_STATUS_HELP)
@side_options("nightly", "repo")
@click.option("--ref", default="main", show_default=True, help="Branch (or any ref) whose head is measured.")
@history_option
@click.option(
    "--shard",
    metavar="I/N",
    help="Measure only the I-th of N slices of the case matrix (split a night over N machines).",
)
@click.option(
    "--night",
    "night_id",
    metavar="ID",
    help="Name of the night the shards belong to, the same for all N (e.g. the CI run id); "
    "default: the head commit.",
)
@side_options("nightly", "strategy", "jobs", "cuda_archs", "package", "build_command", "python")
@click.option(
    "--force", is_flag=True, help="Measure even if the head was already measured by the last nightly."
)
@click.option("--dry-run", is_flag=True, help="Say what would be measured, measure nothing.")
@click.option(
    "--backfill",
    metavar="A..B",
    help="Measure A and the commits of A..B, one night each, as if the nightly had run on each (into the "
    "same history; commits already there are skipped, so a second run resumes). --budget is then the "
    "whole backfill's, --explain's bisects included.",
)
@click.option("--tags", is_flag=True, help="With --backfill: only the tagged commits (and A and B).")
@click.option(
    "--every", type=click.IntRange(min=1), metavar="N", help="With --backfill: every N-th commit (and B)."
)
@click.option(
    "--explain",
    is_flag=True,
    help="Then bisect every change point of this machine not yet explained, and store its culprits "
    "(each bisect's compares within --budget, default 30m; after --backfill, all within what it left).",
)
@counters_option(default=False, help="Count calls and ops per step (slower).")
@sweep_option(
    help="One cell per value of a module kwarg (num_gemms=1,2,4,8); the dashboard draws their slope."
)
@fail_on_option
@config_options
@output_options
@grouped(default_config=DEFAULT_CONFIG, budget_plans=False)  # --budget bounds the whole job
def command(
    ref,
    history_url,
    shard,
    night_id,
    force,
    dry_run,
    backfill,
    tags,
    every,
    explain,
    sides: SideOptions,
    measure: MeasureOptions,
):
    """Measure REF's head against the previous nightly's commit and add it to the history.

    \b
    teperf nightly --repo ~/TransformerEngine --ref main
    teperf nightly --repo ~/TransformerEngine --shard 1/2 --night 2025-06-01    (machine A)
    teperf nightly --repo ~/TransformerEngine --shard 2/2 --night 2025-06-01    (machine B)
    teperf nightly --repo ~/TransformerEngine --backfill v2.10..v2.16 --tags --budget 8h --explain
    """
    if (tags or every) and not backfill:
        raise TeperfError("--tags and --every choose the commits of a --backfill", "add --backfill A..B")
    if backfill and dry_run:
        _backfill_dry_run(backfill, ref, history_url, tags, every, sides, measure.config)
        return
    start, total_s = time.monotonic(), None
    if backfill:
        _backfill(backfill, ref, history_url, tags, every, sides, measure)
        budget = measure.config.schedule.budget_s
        total_s = None if budget is None else max(budget - (time.monotonic() - start), 0.0)
    else:
        _night(ref, history_url, shard, night_id, force, dry_run, sides, measure)
    if explain:
        explain_new(history_url, sides, measure, total_s=total_s)


def _backfill_dry_run(spec, ref, history_url, tags, every, sides: SideOptions, config) -> None:
    """--backfill --dry-run: the commits it would measure, those plan_nightly skips marked; one store read."""
    from teperf.backfill import list_commits, select
    from teperf.history.store import HistoryStore, default_night
    from teperf.nightly import already_measured, local_machine
    from teperf.sides.gitrepo import repo_root

    chosen = select(list_commits(str(repo_root(sides.repo)), spec, tags=tags), tags=tags, every=every)
    df, (machine, _) = HistoryStore(history_url).read(), local_machine(config.device)
    have = [bool(already_measured(df, machine, ref, c.sha, "1/1", default_night(c.sha))) for c in chosen]
    click.echo(
        f"dry run: --backfill {spec} would measure {have.count(False)} commit(s), one night each, oldest"
        f" first; {have.count(True)} already in the store"
    )
    for commit, skip in zip(chosen, have):
        click.echo(f"  {commit.name} {for_terminal(commit.subject[:60])}{'  (in the store)' * skip}")


def _backfill(spec, ref, history_url, tags, every, sides: SideOptions, measure: MeasureOptions) -> None:
    from teperf.backfill import backfill

    try:
        result = backfill(
            measure.config,
            sides,
            measure,
            spec=spec,
            ref=ref,
            history=history_url,
            tags=tags,
            every=every,
            log=_log,
            command=["teperf"] + sys.argv[1:],
        )
    except NightlyInterrupted as stop:
        _log(f"teperf: interrupted; {stop.recorded}; run the same command again to resume")
        sys.exit(exit_status_for_signal(stop.signum))
    _log(result.describe())


def _night(ref, history_url, shard, night_id, force, dry_run, sides: SideOptions, measure: MeasureOptions):
    from teperf import api

    plan = api.plan_nightly(
        measure.config, sides, ref=ref, history=history_url, shard=shard, night=night_id, force=force
    )
    warn_unreadable(plan.store)  # the previous nightly was chosen without them
    _log(plan.describe())
    if measure.fmt == "json" and (plan.choice.skip or dry_run):  # stdout has the plan, not nothing
        click.echo(json.dumps({"nightly": plan.to_dict(), "dry_run": dry_run}, indent=2))
    if plan.choice.skip:
        _log("nightly: nothing new to measure (use --force to measure it again)")
        return
    if dry_run:
        for c in plan.cases:
            _log(f"  would measure {c.key}")
        return
    try:
        result = api.nightly(
            plan,
            measure,
            sides,
            command=["teperf"] + sys.argv[1:],
            view=live_view,
            show=lambda summary: emit(summary, measure.fmt),
        )
    except NightlyInterrupted as stop:
        _log(f"teperf: interrupted; {stop.recorded}. The bundle keeps what was measured: {stop.path}")
        sys.exit(exit_status_for_signal(stop.signum))
    if result.unchanged:
        if measure.fmt == "json":
            click.echo(json.dumps({"nightly": plan.to_dict(), "unchanged": result.unchanged}, indent=2))
        _log(f"nightly: {result.unchanged}; not added to the history")
        return
    if result.machine_warning:
        _log(f"teperf: warning: {result.machine_warning}")
    _log(f"nightly: added to the history: {result.history_file}")
    if result.summary.meta.status == "failed" or result.summary.incomplete_rows:
        sys.exit(EXIT_CELLS_FAILED)
    gate(result.summary, measure.fail_on)
