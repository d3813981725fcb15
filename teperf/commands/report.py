"""teperf report: render a bundle again (a partial one too)."""

from __future__ import annotations

import click

from teperf.commands._common import echo_rendered, emit, format_option
from teperf.config import METRICS
from teperf.render import RENDERERS


@click.command("report")
@click.argument("bundle", type=click.Path())
@format_option(RENDERERS)
@click.option("--metric", type=click.Choice(METRICS), help="Headline clock to summarise.")
@click.option(
    "--by-lane",
    is_flag=True,
    help="Each lane's estimate per cell (runs with --lanes), and whether the lanes agree.",
)
def command(bundle, fmt, metric, by_lane):
    """Print the table of a finished, interrupted or crashed run."""
    from teperf.bundle import Bundle
    from teperf.summary import stats_from_meta, summarize

    meta = Bundle.open(bundle).meta()
    if meta.kind == "bisect":
        from teperf.bisect.report import RENDERERS as BISECT_FORMATS
        from teperf.bisect.report import render_bisect
        from teperf.errors import TeperfError

        if fmt not in BISECT_FORMATS:
            *most, last = BISECT_FORMATS
            raise TeperfError(
                f"a bisect bundle has no {fmt} form", f"use --format {', '.join(most)} or {last}"
            )
        return echo_rendered(render_bisect, bundle, fmt)
    stats = stats_from_meta(meta, metric=metric) if metric else None
    if by_lane:
        from teperf.bylane import render_by_lane

        return echo_rendered(render_by_lane, bundle, fmt, stats)
    emit(summarize(bundle, stats), fmt)
