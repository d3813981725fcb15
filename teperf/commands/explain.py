"""teperf explain: where did a cell's delta come from?"""

from __future__ import annotations

import json

import click

from teperf.commands._common import Number, format_option, tty_progress


@click.command("explain")
@click.argument("bundle", type=click.Path(exists=True))
@click.option(
    "--cell",
    metavar="MODULE/RECIPE[/SHAPE[/MODE]]",
    help="The cell to explain (optional when the bundle has one).",
)
@click.option("--iters", type=int, default=100, show_default=True, help="Profiled steps per side per repeat.")
@click.option(
    "--repeats",
    type=int,
    default=5,
    show_default=True,
    help="Profiles per side, alternating which side goes first; per-function median.",
)
@click.option("--top", type=int, default=15, show_default=True, help="Functions listed per ranking.")
@click.option("--core", type=int, help="Core to pin to (default: the bundle's).")
@click.option(
    "--timeout",
    "timeout_s",
    type=Number(),
    help="Seconds a worker may take for one request (default: the bundle's).",
)
@format_option(("text", "json"), default="text")
def command(bundle, cell, iters, repeats, top, core, timeout_s, fmt):
    """Profile one cell of BUNDLE again on both of its sides (cProfile in pinned
    workers) and list the functions whose own time and call counts changed most.

    \b
    teperf explain results/compare-... --cell LayerNormLinear/bf16
    """
    from teperf.errors import TeperfError
    from teperf.explain.capture import explain_bundle
    from teperf.explain.render import render_report

    if iters < 1 or repeats < 1 or top < 1:
        raise TeperfError("--iters, --repeats and --top must be at least 1", "e.g. --iters 200 --repeats 2")
    progress = tty_progress("teperf explain")
    report = explain_bundle(
        bundle, cell, iters=iters, repeats=repeats, core=core, timeout_s=timeout_s, progress=progress
    )
    if fmt == "json":  # the profiles and own-time intervals per function are in the diff
        out = {k: v for k, v in report.items() if k not in ("profiles", "own_time_ci")}
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(render_report(report, n=top), nl=False)
