"""teperf report: render a bundle again (a partial one too)."""

from __future__ import annotations

import click

from teperf.commands._common import emit
from teperf.render import FORMATS


@click.command("report")
@click.argument("bundle", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--metric", type=click.Choice(["process_cpu", "thread_cpu", "wall"]), help="Headline clock to summarise.")
def command(bundle, fmt, metric):
    """Print the table of a finished, interrupted or crashed run."""
    from teperf.bundle import Bundle
    from teperf.summary import stats_from_meta, summarize

    stats = stats_from_meta(Bundle.open(bundle).read_meta(), metric=metric) if metric else None
    emit(summarize(bundle, stats), fmt)
