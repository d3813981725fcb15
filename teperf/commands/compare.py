"""teperf compare: base vs head, paired and interleaved."""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from teperf.commands._common import (
    BUILD_OPTIONS,
    EXIT_STATUS_HELP,
    config_options,
    counters_option,
    fail_on_option,
    gate,
    grouped,
    interpreter,
    measure_and_report,
    output_options,
    side_options,
    sweep_option,
)
from teperf.errors import TeperfError
from teperf.options import MeasureOptions, SideOptions


@click.command("compare", epilog=EXIT_STATUS_HELP)
@click.argument("spec", required=False, metavar="[BASE..HEAD]")
@side_options("compare", *BUILD_OPTIONS)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Say which strategy each git side needs, why and what it costs; then stop.",
)
@side_options("compare", "cache_dir", "allow_dirty")
@click.option("--base-path", metavar="DIR", help="Directory put first on the base worker's sys.path.")
@click.option("--head-path", metavar="DIR", help="Directory put first on the head worker's sys.path.")
@click.option(
    "--base-python",
    metavar="EXE",
    callback=interpreter,
    help="Interpreter for the base side (e.g. a virtualenv's python).",
)
@click.option("--head-python", metavar="EXE", callback=interpreter, help="Interpreter for the head side.")
@counters_option(default=True)
@click.option(
    "--explain",
    "explain_cell",
    metavar="MODULE/RECIPE",
    help="Afterwards, profile this cell on both sides and show where the delta comes from.",
)
@click.option(
    "--expected",
    metavar="FILE",
    help="Also check the head side's counters against this expected-counters file (teperf counters check); "
    "exit 1 on a change.",
)
@sweep_option()
@fail_on_option
@config_options
@output_options
@grouped()
def command(
    spec,
    plan_only,
    base_path,
    head_path,
    base_python,
    head_python,
    explain_cell,
    expected,
    sides: SideOptions,
    measure: MeasureOptions,
):
    """Compare two sides: git refs (BASE..HEAD), directories or interpreters.

    \b
    teperf compare main..my-branch --repo ~/TransformerEngine
    teperf compare --base-path old/ --head-path new/
    teperf compare --base-python venv-a/bin/python --head-python venv-b/bin/python
    teperf compare main..my-branch --precision 1 --budget 5m --fail-on slower
    """
    from teperf import api

    config = measure.config
    aside = measure.fmt in ("json", "csv")  # the reports after the table: stderr, so that json/csv parse
    if expected:  # checked now, not after minutes of measuring
        from teperf.counters.file import Expected

        if not config.counters:
            raise TeperfError("--expected needs the counters", "leave --no-counters out")
        if config.compile_cache == "warm":  # code loaded from a warm cache counts differently
            raise TeperfError(
                "--expected needs --compile-cache cold, as counters check counts", "leave it out"
            )
        Expected.read(expected)
    if explain_cell:  # checked now, not after minutes of measuring
        from teperf.explain.capture import find_case
        from teperf.plan import expand

        find_case({"cases": [c.to_meta() for c in expand(config)]}, explain_cell, where="the config")
    if spec:
        if base_path or head_path:
            raise TeperfError(
                "BASE..HEAD and --base-path/--head-path both given", "use one way to name the sides"
            )
        from teperf.plan import measured_packages
        from teperf.provenance import check_sides_used
        from teperf.sides.git import plan_sides
        from teperf.sides.gitrepo import repo_root

        repo_root(sides.repo)  # a --repo that is not one is said first
        check_sides_used(config, spec, git=True)  # before any build is planned
        planned = plan_sides(spec, dataclasses.replace(sides, python=base_python or head_python))
        unchanged = planned.unchanged(measured_packages(config))
        if measure.fmt == "json" and (plan_only or unchanged):  # what was decided, for whoever parses stdout
            click.echo(json.dumps({"plan": planned.to_dict(), "unchanged": unchanged}, indent=2))
        if unchanged:
            # a docs-only pull request passes a --fail-on gate: there is nothing its change could move
            click.echo(f"teperf: {unchanged}", err=True)
            return
        if plan_only:
            return
        base, head = planned.make()
    elif plan_only:
        raise TeperfError("--plan needs git refs (BASE..HEAD)", "give BASE..HEAD, or leave --plan out")
    elif any((base_path, head_path, base_python, head_python)):
        # --strategy env names exactly these sides (its help says so): not a git flag here
        ignored = [f for f in sides.git_flags_given() if not (f == "--strategy" and sides.strategy == "env")]
        # one path alone, no interpreter: the other side would be this python, bare
        if (base_path is None) != (head_path is None) and not (base_python or head_python):
            given, label = ("base", "head") if base_path else ("head", "base")
            raise TeperfError(
                f"--{given}-path given without --{label}-path: {label} would be this interpreter with "
                "nothing of its own on sys.path",
                f"give --{label}-path DIR too (or --{label}-python for an installed {label})",
            )
        if ignored:
            raise TeperfError(
                f"{', '.join(ignored)} only {'apply' if len(ignored) > 1 else 'applies'} to git refs "
                "(BASE..HEAD), not to --base-path/--head-path/--base-python/--head-python",
                f"drop {', '.join(ignored)}, or give BASE..HEAD",
            )
        base = api.path_side("base", base_path, base_python)
        head = api.path_side("head", head_path, head_python)
    else:
        raise TeperfError(
            "nothing to compare",
            "give BASE..HEAD (git refs), or --base-path/--head-path, or --base-python/--head-python",
        )
    summary = measure_and_report(api.compare, measure, base, head)
    if explain_cell:
        from teperf.explain.capture import explain_bundle
        from teperf.explain.render import render_report

        click.echo(render_report(explain_bundle(summary.path, explain_cell)), err=aside)
    if measure.sweep:
        from teperf.sweep import analyze, render

        click.echo(render(analyze(summary.path, measure.sweep)), err=aside, nl=False)
    if expected:
        from teperf.counters.gate import check_bundle
        from teperf.counters.render import render

        checked = check_bundle(summary.path, expected)
        click.echo(render(checked), err=aside, nl=False)
    gate(summary, measure.fail_on)
    if expected and not checked.passed:
        sys.exit(1)
