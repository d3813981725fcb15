"""Options and output shared by the measuring commands (run, compare, nightly)."""

from __future__ import annotations

import signal
import sys

import click

from teperf.commands._live import live_view
from teperf.config import KEYS, OVERRIDE_KEYS, Key, load_config, parse_shape, shipped_names
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


EXIT_STATUS_HELP = """\b
Exit status: 0 every cell measured (skipped recipes included); 1 a cell failed
or ended partial (the table says which and why), or a cell has a verdict that
--fail-on names; 2 bad input; 130 Ctrl-C; 143 SIGTERM (the bundle keeps what
was measured, status interrupted)."""


def _key_option(key: Key):
    """The click option of a config key (teperf/config.py's table); None means 'not given'."""
    opt = key.option
    kwargs: dict = {"help": opt.help.replace("{default}", str(key.default))}
    if isinstance(opt.type, tuple):
        kwargs["type"] = click.Choice(opt.type)
    elif opt.type is not None:
        kwargs["type"] = opt.type
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    if opt.show_default is True:
        kwargs["show_default"] = _default(key.default)
    elif opt.show_default:
        kwargs["show_default"] = opt.show_default
    kwargs.update(_PARSE[opt.parse] if opt.parse else {})
    return click.option(key.flag, key.name, **kwargs)


_PARSE = {"names": {"callback": _csv_list}, "shapes": {"multiple": True, "callback": _shape_list}}


def config_options(f):
    """--config plus one override per config key with a flag."""
    keys = {k.name: k for k in KEYS}
    opts = [
        click.option(
            "--config",
            "config_path",
            metavar="FILE|NAME",
            help=f"TOML config: a path, or a shipped config: {', '.join(shipped_names())}.",
            show_default="default",
        ),
        *(_key_option(keys[name]) for name in OVERRIDE_KEYS),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


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
