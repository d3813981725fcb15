"""teperf counters check: a side's exact step counters against an expected file (teperf/counters/)."""

from __future__ import annotations

import json
import sys

import click

from teperf.commands._common import config_options, format_option, interpreter, make_config, tty_progress

CHECK_EPILOG = """\b
Exit status: 0 every cell as expected (or --update wrote the changes); 1 a counter
changed either way, a cell is not in the file, or a cell failed; 2 bad input, or a
file made with other torch/python/package versions."""


@click.group("counters")
def command():
    """Exact per-step counters (Python calls, ATen ops, ...) as a CI gate."""


@command.command("check", epilog=CHECK_EPILOG)
@click.option("--expected", required=True, metavar="FILE", help="The expected-counters file (TOML).")
@click.option(
    "--update",
    is_flag=True,
    help="Rewrite the rows that changed and add new cells (makes FILE when missing); exit 0.",
)
@click.option("--path", "side_path", metavar="DIR", help="Directory put first on the worker's sys.path.")
@click.option(
    "--python", metavar="EXE", callback=interpreter, help="Interpreter to run the worker (default: this one)."
)
@format_option(("text", "json"), default="text")
@config_options
def check_command(expected, update, side_path, python, fmt, **kwargs):
    """Count every cell of the config once on one side and compare with FILE: exact,
    unless a row gives a tolerance. A decrease fails too (a win: update the file).

    \b
    teperf counters check --expected tests/counters.toml
    teperf counters check --config demo --path examples/planted/head --expected demo.toml --update
    """
    from teperf import api
    from teperf.counters.gate import check
    from teperf.counters.render import render

    config = make_config(kwargs)
    side = api.path_side("side", side_path, python)
    result = check(config, side, expected, update=update, progress=tty_progress("teperf counters"))
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(render(result), nl=False)
    if result.failed or (result.changed and not update):
        sys.exit(1)
