"""teperf dashboard: the nightly history as a static site that opens from the file system."""

from __future__ import annotations

import click

from teperf.commands._common import Number
from teperf.commands.history import history_option, night_line, open_store, read_history, select_machine
from teperf.errors import TeperfError


@click.command("dashboard")
@history_option
@click.option(
    "--out",
    default="site",
    show_default=True,
    metavar="DIR",
    help="Directory to write the site into (replaced if empty or a site teperf built).",
)
@click.option(
    "--machine",
    help="Only this machine (fingerprint prefix or label text); default: all, each on its own page.",
)
@click.option("--ref", help="Only nightlies of this branch.")
@click.option(
    "--min-effect",
    "min_effect_pct",
    type=Number(),
    default=2.0,
    show_default=True,
    help="Smallest step or drift reported, in %.",
)
@click.option(
    "--sig-level",
    type=Number(),
    default=0.01,
    show_default=True,
    help="Permutation-test p-value to accept a step of the host times (nights without a paired compare).",
)
def command(history_url, out, machine, ref, min_effect_pct, sig_level):
    """Build the dashboard: overview grid, one chart per cell, detected changes.

    \b
    teperf dashboard --history results/history --out site/
    then open site/index.html (no server or network needed)
    """
    from teperf.history.changepoint import DetectionSettings
    from teperf.history.dashboard import build_from_store
    from teperf.history.nights import nights

    if not 0 < sig_level < 1:
        raise TeperfError(f"--sig-level must be between 0 and 1, got {sig_level}", "e.g. --sig-level 0.01")
    if not 0 <= min_effect_pct <= 100:
        raise TeperfError(
            f"--min-effect must be between 0 and 100, got {min_effect_pct}", "e.g. --min-effect 2"
        )
    settings = DetectionSettings(min_effect_pct=min_effect_pct, sig_level=sig_level)
    store = open_store(history_url)
    if not store.fs.exists(store.root):  # a typo in --history must not build an empty site
        raise TeperfError(
            f"no history store at {store.url}",
            "check --history, or run teperf nightly or teperf import BUNDLE first",
        )
    df = select_machine(read_history(store, ref=ref), machine)
    if df.empty:
        click.echo(f"teperf: the history at {store.url} is empty; writing an empty dashboard", err=True)
    found = nights(df)
    index, cells = build_from_store(store, out, df, settings, found)
    n_changes = sum(len(c.changes) for c in cells)
    n_slower = sum(1 for c in cells for ch in c.changes if ch.direction == "slower")
    machines = len({c.machine for c in cells})
    click.echo(
        f"dashboard: {index} ({len(cells)} cells on {machines} machine{'s' if machines != 1 else ''}, "
        f"{n_changes} change{'s' if n_changes != 1 else ''} detected, {n_slower} slower)"
    )
    for n in found:
        if not n.complete:
            click.echo(f"dashboard: {night_line(n)}")
