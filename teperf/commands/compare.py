"""teperf compare: base vs head, paired and interleaved."""

from __future__ import annotations

import json

import click

from teperf.commands._common import (
    BUILD_OPTIONS,
    EXIT_STATUS_HELP,
    config_options,
    counters_option,
    fail_on_option,
    grouped,
    interpreter,
    measure_and_report,
    output_options,
    report_extras,
    side_options,
    sweep_option,
)
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

    api.check_extras(measure.config, expected=expected, explain_cell=explain_cell)
    paths = dict(base_path=base_path, head_path=head_path, base_python=base_python, head_python=head_python)
    chosen = api.compare_sides(measure.config, sides, spec, plan_only=plan_only, **paths)
    if chosen.planned and measure.fmt == "json" and (plan_only or chosen.unchanged):  # for who parses stdout
        click.echo(json.dumps({"plan": chosen.planned.to_dict(), "unchanged": chosen.unchanged}, indent=2))
    if chosen.unchanged:  # a docs-only pull request passes a --fail-on gate: nothing its change could move
        click.echo(f"teperf: {chosen.unchanged}", err=True)
    if chosen.base is None:
        return
    summary = measure_and_report(api.compare, measure, chosen.base, chosen.head)
    extras = api.extras(summary, explain_cell=explain_cell, sweep=measure.sweep, expected=expected)
    report_extras(summary, extras, measure)
