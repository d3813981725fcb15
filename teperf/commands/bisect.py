"""teperf bisect: which commit of GOOD..BAD moved a cell? Counters first, timing to confirm."""

from __future__ import annotations

import shlex
import sys

import click

from teperf.commands._common import _console, config_options, make_config
from teperf.sides import strategies

DEFAULT_BUDGET_S = 1800.0


@click.command("bisect")
@click.argument("spec", metavar="GOOD..BAD")
@click.option(
    "--cell",
    required=True,
    metavar="MODULE/RECIPE[/SHAPE[/MODE]]",
    help="The cell that moved (one of the config's).",
)
@click.option("--repo", default=".", show_default=True, metavar="DIR", help="Git repository the refs are in.")
@click.option(
    "--strategy",
    type=click.Choice(strategies.GIT_NAMES),
    default="auto",
    show_default=True,
    help="How each commit is made runnable, as in compare (see teperf compare --help).",
)
@click.option(
    "--package",
    metavar="NAME",
    help="Package or module under test (its import name; default: found in the repo: transformer_engine, pyproject's name, the one top-level package or module).",
)
@click.option(
    "--package-dir",
    metavar="PATH",
    help="The package's directory inside the repo, or the one that holds a single module NAME.py "
    "(default: found by name).",
)
@click.option("--build-command", metavar="CMD", help="Build command of --strategy build (as in compare).")
@click.option(
    "--jobs", type=int, metavar="N", help="Parallel compile jobs of extension and build strategies."
)
@click.option(
    "--layout",
    "layout_file",
    metavar="FILE",
    help="TOML file: which paths are core, extension, version files (as in compare).",
)
@click.option("--cache-dir", metavar="DIR", help="Where git trees, overlays and builds are cached.")
@click.option("--python", metavar="EXE", help="Interpreter that runs the workers (default: this one).")
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
    help="Compare GOOD..BAD and the biggest culprits (each against its parent) in time.",
)
@click.option("--results-dir", metavar="DIR", help="Where the bundle goes (default: ./results).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True
)
@config_options
def command(
    spec,
    cell,
    repo,
    strategy,
    package,
    package_dir,
    build_command,
    jobs,
    layout_file,
    cache_dir,
    python,
    plan_only,
    confirm,
    results_dir,
    fmt,
    **kwargs,
):
    """Find the commit of GOOD..BAD (first-parent history) that moved one cell.

    \b
    teperf bisect v2.15..v2.16 --cell Linear/bf16 --repo ~/TransformerEngine --config nightly

    Counters at GOOD and BAD first; when one differs, every commit that moved
    it (one worker run per probe; k change points cost about k x log2(n)
    probes), each with its share of GOOD..BAD's change, biggest first; those
    that moved the other way apart. Then GOOD..BAD and the biggest culprits,
    each against its parent, in time. When no counter differs, every step in
    paired timings. --budget (default 30m) bounds the timing compares
    together, and a probe whose interval cannot decide is measured again with
    twice the pairs (with --precision: until its interval is that narrow)
    while the budget lasts.

    \b
    Exit 0: the commits named carry the change (or there is none);
    exit 1: unexplained (only opposite movers, no decisive step), one line on stderr.
    """
    from teperf.api import Interrupted
    from teperf.bisect.report import render_bisect
    from teperf.bisect.runner import bisect
    from teperf.bisect.sides import GitSideFactory

    config = make_config(kwargs)
    budget_s = config.schedule.budget_s or DEFAULT_BUDGET_S
    if python:
        from teperf.engine.spawn import check_python

        check_python(python)
    factory = GitSideFactory(
        repo=repo,
        package=package,
        package_dir=package_dir,
        strategy=strategy,
        python=python or sys.executable,
        cache_dir=cache_dir,
        jobs=jobs,
        layout=layout_file,
        build_command=shlex.split(build_command) if build_command else None,
    )

    def show(path) -> None:
        text = render_bisect(path, fmt, console=_console())
        if text is not None:
            click.echo(text, nl=False)

    try:
        path = bisect(
            config,
            spec,
            cell,
            factory=factory,
            repo=repo,
            results_dir=results_dir,
            budget_s=budget_s,
            confirm=confirm,
            command=["teperf"] + sys.argv[1:],
            plan_only=plan_only,
        )
    except Interrupted as stop:
        click.echo(f"teperf: interrupted; the bundle keeps the probes so far: {stop.path}", err=True)
        show(stop.path)
        sys.exit(130)
    if path is not None:
        show(path)
        from teperf.bisect.report import load

        result = load(path)[0].get("result") or {}
        if result.get("explained") is False:  # the commits named do not carry the change: say so, exit 1
            click.echo(f"teperf bisect: {result.get('answer')}", err=True)
            sys.exit(1)
