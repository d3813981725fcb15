"""teperf bisect: which commit of GOOD..BAD moved a cell? Counters first, timing to confirm."""

from __future__ import annotations

import shlex
import sys

import click

from teperf.commands._common import _console, config_options, make_config


@click.command("bisect")
@click.argument("spec", metavar="GOOD..BAD")
@click.option("--cell", required=True, metavar="MODULE/RECIPE[/SHAPE[/MODE]]", help="The cell that moved (one of the config's).")
@click.option("--repo", default=".", show_default=True, metavar="DIR", help="Git repository the refs are in.")
@click.option("--strategy", type=click.Choice(["auto", "overlay", "build"]), default="auto", show_default=True, help="How each commit is made runnable (as in compare).")
@click.option("--package", default="transformer_engine", show_default=True, help="Package under test.")
@click.option("--package-dir", metavar="PATH", help="The package's directory inside the repo (default: found by name).")
@click.option("--build-command", metavar="CMD", help="Build command for --strategy build.")
@click.option("--cache-dir", metavar="DIR", help="Where git trees, overlays and builds are cached.")
@click.option("--python", metavar="EXE", help="Interpreter that runs the workers (default: this one).")
@click.option("--budget", "budget_s", type=float, default=1800.0, show_default=True, metavar="SECONDS", help="Timing search: seconds of compares, re-measuring undecided probes with twice the pairs.")
@click.option("--confirm/--no-confirm", default=True, show_default=True, help="Compare the culprit against its parent in time.")
@click.option("--results-dir", metavar="DIR", help="Where the bundle goes (default: ./results).")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@config_options
def command(spec, cell, repo, strategy, package, package_dir, build_command, cache_dir, python, budget_s, confirm, results_dir, fmt, **kwargs):
    """Find the commit of GOOD..BAD (first-parent history) that moved one cell.

    \b
    teperf bisect v2.15..v2.16 --cell Linear/bf16 --repo ~/TransformerEngine --config nightly
    """
    from teperf.bisect.report import render_bisect
    from teperf.bisect.runner import bisect
    from teperf.bisect.sides import GitSideFactory
    from teperf.errors import TeperfError

    if budget_s <= 0:
        raise TeperfError(f"--budget {budget_s:g}: must be positive", "e.g. --budget 600 (seconds)")
    config = make_config(kwargs)
    if python:
        from teperf.engine.spawn import check_python

        check_python(python)
    factory = GitSideFactory(
        repo=repo, package=package, package_dir=package_dir, strategy=strategy, python=python or sys.executable,
        cache_dir=cache_dir, build_command=shlex.split(build_command) if build_command else None,
    )
    path = bisect(config, spec, cell, factory=factory, repo=repo, results_dir=results_dir, budget_s=budget_s,
                  confirm=confirm, command=["teperf"] + sys.argv[1:])
    text = render_bisect(path, fmt, console=_console())
    if text is not None:
        click.echo(text, nl=False)
