"""teperf run: one side alone, absolute host times."""

from __future__ import annotations

import click

from teperf.commands._common import (
    RUN_EXIT_STATUS_HELP,
    config_options,
    counters_option,
    grouped,
    interpreter,
    measure_and_report,
    output_options,
    report_extras,
    sweep_option,
)
from teperf.options import MeasureOptions


@click.command("run", epilog=RUN_EXIT_STATUS_HELP)
@config_options
@output_options
@click.option("--path", "side_path", metavar="DIR", help="Directory put first on the worker's sys.path.")
@click.option(
    "--python", metavar="EXE", callback=interpreter, help="Interpreter to run the worker (default: this one)."
)
@click.option("--label", default="run", show_default=True, help="Name of the side in the output.")
@sweep_option()
@counters_option(default=False)
@grouped()
def command(side_path, python, label, measure: MeasureOptions):
    """Measure one side: median host time per fwd+bwd step of every case."""
    from teperf import api

    summary = measure_and_report(api.run, measure, api.path_side(label, side_path, python))
    report_extras(summary, api.extras(summary, sweep=measure.sweep), measure)
