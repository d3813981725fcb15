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
    import dataclasses

    from teperf.api import summarize
    from teperf.bundle import Bundle
    from teperf.config import Stats

    stats = None
    if metric:
        raw = Bundle.open(bundle).read_meta().get("config", {}).get("stats", {})
        stats = dataclasses.replace(Stats(**raw), metric=metric)
    emit(summarize(bundle, stats), fmt)
