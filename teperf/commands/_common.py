"""Options and output shared by the measuring commands (run, compare, nightly)."""

from __future__ import annotations

import signal
import sys

import click

from teperf.commands._live import live_view
from teperf.config import (
    COMPILE_CACHES,
    METRICS,
    MODES,
    SPAWNS,
    Schedule,
    Stats,
    load_config,
    parse_shape,
    shipped_names,
)
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


def _default(value) -> str:
    # The dataclass default (one source of truth); a --config file may set its own.
    return f"{value:g}, or the config's" if isinstance(value, float) else f"{value}, or the config's"


_SCHED, _STATS = Schedule(), Stats()

EXIT_STATUS_HELP = """\b
Exit status: 0 every cell measured (skipped recipes included); 1 a cell failed
or ended partial (the table says which and why), or a cell has a verdict that
--fail-on names; 2 bad input; 130 Ctrl-C; 143 SIGTERM (the bundle keeps what
was measured, status interrupted)."""


def config_options(f):
    """--config plus one override per config field; None means 'not given'."""
    opts = [
        click.option(
            "--config",
            "config_path",
            metavar="FILE|NAME",
            help=f"TOML config: a path, or a shipped config: {', '.join(shipped_names())}.",
            show_default="default",
        ),
        click.option(
            "--backend",
            type=click.Choice(["torch", "te"]),
            help="torch: plain-PyTorch reference modules (CPU or GPU); te: TransformerEngine (needs CUDA).",
        ),
        click.option(
            "--device",
            type=click.Choice(["cpu", "cuda"]),
            help="Where the modules run (default: cpu for torch, cuda for te).",
        ),
        click.option(
            "--modules", callback=_csv_list, metavar="A,B", help="Modules to measure (comma-separated)."
        ),
        click.option("--recipes", callback=_csv_list, metavar="A,B", help="Recipes, e.g. bf16,fp8_delayed."),
        click.option("--modes", callback=_csv_list, metavar="A,B", help=f"Modes: {', '.join(MODES)}."),
        click.option(
            "--shape",
            "shapes",
            multiple=True,
            callback=_shape_list,
            metavar="8,2,256",
            help="Input shape; repeat for several.",
        ),
        click.option(
            "--processes",
            type=int,
            help="Fresh worker pairs (the unit of replication).",
            show_default=_default(_SCHED.processes),
        ),
        click.option(
            "--rounds",
            type=int,
            help="Rounds per pair; each round runs every case in a new shuffled order.",
            show_default=_default(_SCHED.rounds),
        ),
        click.option(
            "--trials",
            type=int,
            help="Trials per case per round (compare: rounds x trials even, so A B and B A couples balance).",
            show_default=_default(_SCHED.trials),
        ),
        click.option(
            "--iters", type=int, help="fwd+bwd steps per trial.", show_default=_default(_SCHED.iters)
        ),
        click.option(
            "--warmup",
            type=int,
            help="Untimed steps after building each case.",
            show_default=_default(_SCHED.warmup),
        ),
        click.option(
            "--timeout",
            "timeout_s",
            type=float,
            help="Seconds a worker may take for one request (start-up, set-up or one trial); then it is killed.",
            show_default=_default(_SCHED.timeout_s),
        ),
        click.option("--core", type=int, help="CPU core to pin the workers to (default: the last one)."),
        click.option(
            "--seed", type=int, help="Seed of the case order and the hash seeds.", show_default=_default(0)
        ),
        click.option(
            "--metric",
            type=click.Choice(METRICS),
            help="Headline clock.",
            show_default=_default(_STATS.metric),
        ),
        click.option(
            "--prestart",
            metavar="N|auto",
            help="Pairs to start ahead on spare cores while one measures (auto: one core per worker, up to 8 pairs; 0 = off).",
            show_default="auto",
        ),
        click.option(
            "--lanes",
            metavar="N|auto",
            help="Pairs measuring at once, each on its own physical core (auto: "
            "one lane per 4 physical cores, at most 4; see README, 'Parallel lanes').",
            show_default="1, or the config's",
        ),
        click.option(
            "--min-effect",
            "min_effect_pct",
            type=float,
            help="Changes under this many % do not matter: 'no change' needs the whole interval inside +-this.",
            show_default=_default(_STATS.min_effect_pct),
        ),
        click.option(
            "--min-effect-once",
            "min_effect_once_pct",
            type=float,
            help="The same for one-time costs (first call, recompile), which vary more between processes.",
            show_default=_default(_STATS.min_effect_once_pct),
        ),
        click.option(
            "--max-contended",
            "max_contended_pct",
            type=float,
            metavar="PCT",
            help="A cell with more than this many % of its trial couples sharing the measuring core (even after "
            "re-measuring) is 'inconclusive (load)'; 100 accepts any load: every couple counts (README, 'A loaded "
            "machine').",
            show_default=_default(_STATS.max_contended_pct),
        ),
        click.option(
            "--precision",
            "precision_pct",
            type=float,
            metavar="P",
            help="Keep adding fresh pairs until every cell's 95% interval is at most +-P % (or the budget is spent); --processes is then not used.",
        ),
        click.option(
            "--budget",
            "budget_s",
            metavar="DURATION",
            help="Wall-clock limit of the measuring: 5m, 90s, 1h or seconds (default with --precision: 10m).",
        ),
        click.option(
            "--compile-cache",
            type=click.Choice(COMPILE_CACHES),
            help="Inductor's on-disk cache at a compile case's first call: cold (default, empty per case "
            "and process) or warm (filled by a throwaway worker per side before the first pair).",
        ),
        click.option(
            "--spawn",
            type=click.Choice(SPAWNS),
            help="How each pair's workers start: fresh interpreters (default), or forked from a server per "
            "side that imported torch and the package once (starts in about a second; a new server with a "
            "new hash seed every --server-pairs pairs).",
        ),
        click.option(
            "--server-pairs",
            "server_pairs",
            type=int,
            metavar="N",
            help=f"With --spawn forkserver: pairs each server serves before a fresh one takes over (default {_SCHED.server_pairs}).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


OVERRIDE_KEYS = (
    "backend",
    "device",
    "modules",
    "recipes",
    "modes",
    "shapes",
    "processes",
    "rounds",
    "trials",
    "iters",
    "warmup",
    "timeout_s",
    "core",
    "seed",
    "metric",
    "min_effect_pct",
    "min_effect_once_pct",
    "max_contended_pct",
    "prestart",
    "lanes",
    "precision_pct",
    "budget_s",
    "compile_cache",
    "spawn",
    "server_pairs",
)


def make_config(kwargs: dict, **extra):
    overrides = {k: kwargs.pop(k, None) for k in OVERRIDE_KEYS}
    overrides.update({k: v for k, v in extra.items() if v is not None})
    path = kwargs.pop("config_path", None) or "default"
    return load_config(path, overrides)


def fail_on_option(f):
    return click.option(
        "--fail-on",
        "fail_on",
        multiple=True,
        metavar="VERDICT",
        help="Exit 1 when any cell has this verdict, per step or one-time (first call, recompile): slower, faster, "
        "change (either), inconclusive; repeat or join with commas.",
    )(f)


def gate(summary, verdicts: set) -> None:
    """--fail-on: exit 1, naming the cells in one line on stderr, when any cell has one of ``verdicts``."""
    from teperf.gate import failing_cells

    cells = failing_cells(summary.rows, verdicts) if verdicts else []
    if cells:
        click.echo(
            f"teperf: fail-on: {len(cells)} cell{'s' if len(cells) != 1 else ''}: {'; '.join(cells)}",
            err=True,
        )
        sys.exit(1)


def output_options(f):
    f = click.option("--results-dir", metavar="DIR", help="Where bundles go.", show_default="./results")(f)
    f = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(f)
    return f


def _console(stderr=False):
    from rich.console import Console

    return Console(stderr=stderr, width=None if sys.stdout.isatty() else 200)


def emit(summary, fmt: str) -> None:
    text = render(summary, fmt, console=_console())
    if text is not None:
        click.echo(text, nl=False)


def _preload_report() -> None:
    """Import what the summary and the table import lazily, before measuring: a Ctrl-C that lands
    inside an import leaves that module half-imported, and printing what was measured then fails."""
    import rich.markup  # noqa: F401
    import rich.table  # noqa: F401

    import teperf.explain  # noqa: F401
    import teperf.schema  # noqa: F401
    from teperf.stats import preload

    preload()


def measure_and_report(fn, fmt: str):
    """Run ``fn(progress_factory, live_listener) -> bundle path``, print its summary and exit with the
    status a CI relies on (teperf.errors): 1 when a cell failed or ended partial, 130/143
    on Ctrl-C/SIGTERM (after printing what was measured)."""
    from teperf.api import Interrupted, summarize
    from teperf.engine.hints import failure_hint

    _preload_report()

    try:
        with live_view() as (factory, listener):
            path = fn(factory, listener)
    except Interrupted as stop:
        how = "terminated (SIGTERM)" if stop.signum == signal.SIGTERM else "interrupted"
        click.echo(f"teperf: {how}; the bundle keeps what was measured: {stop.path}", err=True)
        emit(summarize(stop.path), fmt)
        sys.exit(exit_status_for_signal(stop.signum))
    summary = summarize(path)
    emit(summary, fmt)
    for problem in summary.code_problems:  # a CI job must not read this as a clean result
        click.echo(
            for_terminal(f"teperf: {problem}; check what each side points at (bundle: {path})"), err=True
        )
    if summary.code_problems:
        sys.exit(EXIT_CELLS_FAILED)
    bad = summary.incomplete_rows
    if bad:
        first = summary.meta.get("error") or next((r.get("error") for r in bad if r.get("error")), "") or ""
        every = (
            "every cell"
            if len(bad) == len([r for r in summary.rows if r.get("status") != "skipped"])
            else f"{len(bad)} cell(s)"
        )
        click.echo(
            for_terminal(
                f"teperf: {every} failed or ended partial ({first[:300]}); {failure_hint(first)} "
                f"(worker logs: {path}/workers/)"
            ),
            err=True,
        )
        sys.exit(EXIT_CELLS_FAILED)
    return summary
