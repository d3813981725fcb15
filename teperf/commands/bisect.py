"""teperf bisect: which commits of GOOD..BAD cost the time of a cell? Counters, then time."""

from __future__ import annotations

import json
import sys

import click

from teperf.bisect.conclude import EXIT_HELP
from teperf.bisect.report import RENDERERS, load, render_bisect
from teperf.bisect.runner import DEFAULT_BISECT_BUDGET_S as DEFAULT_BUDGET_S
from teperf.commands._common import (
    BUILD_OPTIONS,
    config_options,
    echo_rendered,
    format_option,
    grouped,
    side_options,
)
from teperf.options import MeasureOptions, SideOptions


@click.command("bisect", epilog=EXIT_HELP)
@click.argument("spec", metavar="GOOD..BAD")
@click.option(
    "--cell",
    required=True,
    metavar="MODULE/RECIPE[/SHAPE[/MODE]]",
    help="The cell that moved (one of the config's).",
)
@side_options("bisect", *BUILD_OPTIONS, "cache_dir", "python")
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Say the plan (commits, expected probes, tier per commit, expected time); then stop.",
)
@click.option(
    "--confirm/--no-confirm",
    default=True,
    show_default=True,
    help="Search in time (default); --no-confirm: counters only, shares of the counter change.",
)
@click.option("--results-dir", metavar="DIR", help="Where the bundle goes (default: ./results).")
@format_option(RENDERERS)
@config_options
@grouped(budget_plans=False)  # --budget bounds the whole bisect
def command(spec, cell, plan_only, confirm, sides: SideOptions, measure: MeasureOptions):
    """Find the commits of GOOD..BAD (first-parent history) that cost one cell its time.

    \b
    teperf bisect v2.15..v2.16 --cell Linear/bf16 --repo ~/TransformerEngine --config nightly

    Counters at GOOD and BAD first (each a worker forked from one that
    imported torch, about a second); when one differs, every commit that moved
    it (k change points cost about k x log2(n) probes; a segment under 1 % of
    GOOD's counts is left). Then time: GOOD..BAD compared, then both halves of
    every part that moved, the biggest first, down to single commits (about 2
    x log2(n) compares per step), so that a commit that moves time without
    moving a counter is found too. Culprits are ranked by their share of
    GOOD..BAD's measured delta, each with its own compare against its parent
    and the counters that moved at it beside it; every other counter change
    point follows with what time could tell of it (a share interval, or "too
    small to tell at this schedule: under X %"). --budget (default 30m) bounds
    the compares; an undecided part is measured again with 2x, then 4x the
    pairs while it lasts and that could change the answer (by the part's
    measured spread); the answer says about how many pairs would settle the
    parts left. When --budget is spent the search ends with what it knows. An
    answer that is not "explained" is also one line on stderr.
    """
    from teperf.bisect.runner import bisect
    from teperf.bisect.sides import GitSideFactory
    from teperf.errors import Interrupted, exit_status_for_signal, stopped_by

    config, fmt = measure.config, measure.fmt
    if sides.python:
        from teperf.engine.spawn import check_python

        check_python(sides.python)

    try:
        path = bisect(
            config,
            spec,
            cell,
            factory=GitSideFactory(sides),
            repo=sides.repo,
            results_dir=measure.results_dir,
            budget_s=config.schedule.budget_s or DEFAULT_BUDGET_S,
            confirm=confirm,
            command=["teperf"] + sys.argv[1:],
            plan_only=plan_only,
            # --plan --format json: the plan on stdout, as data (the lines go to stderr either way)
            on_plan=(lambda plan: click.echo(json.dumps(plan, indent=2, default=str)))
            if plan_only and fmt == "json"
            else None,
        )
    except Interrupted as stop:  # Ctrl-C 130, SIGTERM 143 (as the help says)
        click.echo(
            f"teperf: {stopped_by(stop.signum)}; the bundle keeps the probes so far: {stop.path}", err=True
        )
        echo_rendered(render_bisect, stop.path, fmt)
        sys.exit(exit_status_for_signal(stop.signum))
    if path is not None:
        echo_rendered(render_bisect, path, fmt)
        result = load(path)[0].get("result") or {}
        code = result.get("exit_code", 0)
        if code:  # not explained: the answer on stderr too, and its exit status (EXIT_HELP)
            click.echo(f"teperf bisect: {result.get('answer')}", err=True)
            sys.exit(code)
