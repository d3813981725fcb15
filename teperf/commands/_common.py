"""Options and output shared by the measuring commands (run, compare, nightly)."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

import click

from teperf.config import MODES, Schedule, Stats, load_config, parse_shape, shipped_names
from teperf.errors import EXIT_CELLS_FAILED, exit_status_for_signal
from teperf.render import FORMATS, render
from teperf.safe_text import for_terminal


def _csv_list(ctx, param, value):
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]  # [] when given empty: refused by config


def _shape_list(ctx, param, value):
    if not value:
        return None
    return [parse_shape(v) for v in value]


def config_options(f):
    """--config plus one override per config field; None means 'not given'."""
    opts = [
        click.option("--config", "config_path", metavar="FILE|NAME", help=f"TOML config: a path, or a shipped config: {', '.join(shipped_names())}.", show_default="default"),
        click.option("--backend", type=click.Choice(["torch", "te"]), help="torch: plain-PyTorch reference modules; te: TransformerEngine."),
        click.option("--device", type=click.Choice(["cpu", "cuda"])),
        click.option("--modules", callback=_csv_list, metavar="A,B", help="Modules to measure (comma-separated)."),
        click.option("--recipes", callback=_csv_list, metavar="A,B", help="Recipes, e.g. bf16,fp8_delayed."),
        click.option("--modes", callback=_csv_list, metavar="A,B", help=f"Modes: {', '.join(MODES)}."),
        click.option("--shape", "shapes", multiple=True, callback=_shape_list, metavar="8,2,256", help="Input shape; repeat for several."),
        click.option("--processes", type=int, help="Fresh worker pairs (the unit of replication)."),
        click.option("--rounds", type=int),
        click.option("--trials", type=int, help="Trials per case per round."),
        click.option("--iters", type=int, help="fwd+bwd steps per trial."),
        click.option("--warmup", type=int, help="Untimed steps after building each case."),
        click.option("--timeout", "timeout_s", type=float, help="Seconds a worker may take for one request."),
        click.option("--core", type=int, help="CPU core to pin the workers to (default: the last one)."),
        click.option("--seed", type=int, help="Seed of the case order and the hash seeds."),
        click.option("--metric", type=click.Choice(["process_cpu", "thread_cpu", "wall"]), help="Headline clock (default process_cpu)."),
        click.option("--prestart", metavar="N|auto", help="Pairs to start ahead on spare cores while one measures (default auto: one core per worker, up to 8 pairs; 0 = off)."),
        click.option("--min-effect", "min_effect_pct", type=float, help="Changes under this many % are 'no change'."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


OVERRIDE_KEYS = ("backend", "device", "modules", "recipes", "modes", "shapes", "processes", "rounds", "trials", "iters", "warmup", "timeout_s", "core", "seed", "metric", "min_effect_pct", "prestart")


def make_config(kwargs: dict, **extra):
    overrides = {k: kwargs.pop(k, None) for k in OVERRIDE_KEYS}
    overrides.update({k: v for k, v in extra.items() if v is not None})
    path = kwargs.pop("config_path", None) or "default"
    return load_config(path, overrides)


def output_options(f):
    f = click.option("--results-dir", metavar="DIR", help="Where bundles go (default: ./results).")(f)
    f = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help="Output format.")(f)
    return f


def make_progress():
    """A rich progress bar on a terminal, nothing otherwise."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("[bold]measuring"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        transient=True,
        console=_console(stderr=True),
    )

    def factory(total):
        task = bar.add_task("", total=total)

        def advance(steps, what):
            bar.update(task, advance=steps, description=what)

        return advance

    return bar, factory


def _console(stderr=False):
    from rich.console import Console

    return Console(stderr=stderr, width=None if sys.stdout.isatty() else 200)


def emit(summary, fmt: str) -> None:
    text = render(summary, fmt, console=_console())
    if text is not None:
        click.echo(text, nl=False)


@contextmanager
def progress_bar():
    bar, factory = make_progress()
    if bar is None:
        yield None
        return
    with bar:
        yield factory


def measure_and_report(fn, fmt: str):
    """Run ``fn(progress_factory) -> bundle path``, print its summary and exit with the
    status a CI relies on (teperf.errors): 1 when a cell failed or ended partial, 130/143
    on Ctrl-C/SIGTERM (after printing what was measured)."""
    from teperf.api import Interrupted, summarize
    from teperf.engine.hints import failure_hint

    try:
        with progress_bar() as factory:
            path = fn(factory)
    except Interrupted as stop:
        how = "terminated (SIGTERM)" if stop.signum == signal.SIGTERM else "interrupted"
        click.echo(f"teperf: {how}; the bundle keeps what was measured: {stop.path}", err=True)
        emit(summarize(stop.path), fmt)
        sys.exit(exit_status_for_signal(stop.signum))
    summary = summarize(path)
    emit(summary, fmt)
    bad = summary.incomplete_rows
    if bad:
        first = summary.meta.get("error") or next((r.get("error") for r in bad if r.get("error")), "") or ""
        every = "every cell" if len(bad) == len([r for r in summary.rows if r.get("status") != "skipped"]) else f"{len(bad)} cell(s)"
        click.echo(for_terminal(f"teperf: {every} failed or ended partial ({first[:300]}); {failure_hint(first)} "
                                f"(worker logs: {path}/workers/)"), err=True)
        sys.exit(EXIT_CELLS_FAILED)
    return summary
