"""Options and output shared by the measuring commands (run, compare, nightly)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import os
import shlex
import sys

import click

from teperf.commands._live import live_view
from teperf.config import KEYS, OVERRIDE_KEYS, Option, load_config, parse_shape, shipped_names
from teperf.errors import EXIT_CELLS_FAILED, TeperfError, exit_status_for_signal, stopped_by
from teperf.log import stderr_log
from teperf.options import MeasureOptions, SideOptions
from teperf.render import RENDERERS, render
from teperf.safe_text import for_terminal


def _csv_list(ctx, param, value):
    # repeatable, as --shape is: --modules A --modules B,C is A,B,C (the last alone was kept); () is not
    # given; [] when given empty: refused by config
    return [v.strip() for item in value for v in item.split(",") if v.strip()] if value else None


def _shape_list(ctx, param, value):
    return [parse_shape(v) for v in value] if value else None


class Number(click.ParamType):
    """A finite float at least ``minimum``, for every float option: float() takes "nan", which passes
    any later bound check."""

    name = "float"  # the metavar --help shows, as click's FLOAT

    def __init__(self, minimum: float | None = None):
        self.minimum = minimum

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.minimum is not None and number < self.minimum:
            self.fail(f"{value!r} is below {self.minimum:g}", param, ctx)
        return number


def _absolute(python: str) -> str:
    return os.path.abspath(python) if os.sep in python or python.startswith(".") else python


def interpreter(ctx, param, value):
    """An interpreter given as a path, made absolute against the user's directory: the pre-check and the
    workers run it from elsewhere (a temporary directory, a side's tree). A bare name stays for PATH."""
    if not value:
        return value
    return tuple(map(_absolute, value)) if isinstance(value, tuple) else _absolute(value)


EXIT_STATUS_HELP = """\b
Exit status: 0 every cell measured (skipped recipes included); 1 a cell failed
or ended partial (the table says which and why), or a cell has a verdict that
--fail-on names; 2 bad input; 130 Ctrl-C; 143 SIGTERM; 129 SIGHUP (the bundle
keeps what was measured, status interrupted)."""
RUN_EXIT_STATUS_HELP = """\b
Exit status: 0 every cell measured (skipped recipes included); 1 a cell failed
or ended partial (the table says which and why); 2 bad input; 130 Ctrl-C;
143 SIGTERM; 129 SIGHUP (the bundle keeps what was measured, status interrupted)."""  # run has no --fail-on


def _click_kwargs(opt: Option, help_text: str) -> dict:
    """The click kwargs an Option (a config key's or a git-side option's) says, but its default."""
    kind = (
        click.Choice(opt.type) if isinstance(opt.type, tuple) else Number() if opt.type is float else opt.type
    )
    return {"help": help_text, "type": kind, "metavar": opt.metavar, **_PARSE.get(opt.parse, {})}


_PARSE = {
    "names": {"multiple": True, "callback": _csv_list},
    "shapes": {"multiple": True, "callback": _shape_list},
    "flag": {"is_flag": True, "default": None},
    "python": {"callback": interpreter},
}


def config_options(f):
    """--config and each config key's flag (teperf/config/keys.py's table); None means 'not given'."""
    keys = {k.name: k for k in KEYS}
    for key in map(keys.get, reversed(OVERRIDE_KEYS)):
        show = key.option.show_default
        if show is True:  # the dataclass default (one source of truth); a --config file may set its own
            default = f"{key.default:g}" if isinstance(key.default, float) else key.default
            show = f"{default}, or the config's"
        kwargs = _click_kwargs(key.option, key.option.help.replace("{default}", str(key.default)))
        f = click.option(key.flag, key.name, show_default=show, **kwargs)(f)
    return click.option(
        "--config",
        "config_path",
        metavar="FILE|NAME",
        help=f"TOML config: a path, or a shipped config: {', '.join(shipped_names())}.",
        show_default="default",
    )(f)


def make_config(kwargs: dict, default_config: str = "default", budget_plans: bool = True, **extra):
    overrides = {k: kwargs.pop(k, None) for k in OVERRIDE_KEYS} | extra  # None: not given
    path = kwargs.pop("config_path", None)
    if path is not None and not path.strip():
        raise TeperfError(
            "--config is empty", f"give a TOML file's path or one of: {', '.join(shipped_names())}"
        )
    return load_config(path if path is not None else default_config, overrides, budget_plans)


# The git-side options are SideOptions' fields. Where bisect and nightly word one their own way (as they
# always have: a change here changes that command's --help).
_SIDE_WORDING = {
    "bisect": {
        "strategy": "How each commit is made runnable, as in compare (see teperf compare --help).",
        "build_command": "Build command of --strategy build (as in compare).",
        "jobs": "Parallel compile jobs of extension and build strategies.",
        "layout": "TOML file: which paths are core, extension, version files (as in compare).",
        "cache_dir": "Where git trees, overlays and builds are cached.",
    },
    "nightly": {
        "repo": "Git checkout of the project (e.g. TransformerEngine).",
        "strategy": "How a git side is made runnable. {git_strategies}",
        "jobs": "Parallel compile jobs (default: the free cores).",
        "build_command": "Build command for --strategy build.",
    },
}


SIDE_FIELDS = tuple(f.name for f in dataclasses.fields(SideOptions))
_SIDE_FLAGS = {f.name: f for f in dataclasses.fields(SideOptions) if f.metadata.get("option")}
# the options that say how a side is built from a commit, in --help order (compare, bisect)
BUILD_OPTIONS = tuple("repo strategy package package_dir build_command jobs cuda_archs layout".split())


def side_options(command: str, *names: str):
    """The git-side options ``names`` (SideOptions' fields), in this order, as ``command`` words them."""
    from teperf.sides import strategies
    from teperf.sides.strategies.build import PLACEHOLDERS

    wording = _SIDE_WORDING.get(command, {})
    words = {
        "strategies": strategies.help_text(),
        "git_strategies": strategies.help_text(strategies.GIT_NAMES),
        "placeholders": ", ".join(f"{k} {v}" for k, v in PLACEHOLDERS.items()),
    }

    def decorate(f):
        for name in reversed(names):
            field = _SIDE_FLAGS[name]
            opt = field.metadata["option"]
            kwargs = _click_kwargs(opt, wording.get(name, opt.help).format(**words))
            if field.default is not None:
                kwargs.update(default=field.default, show_default=opt.show_default)
            if opt.parse == "strategy":  # bisect, nightly: the strategies that make sides from git refs
                kwargs["type"] = click.Choice(strategies.GIT_NAMES if wording else strategies.NAMES)
            f = click.option("--" + name.replace("_", "-"), name, **kwargs)(f)
        return f

    return decorate


def grouped(default_config: str = "default", budget_plans: bool = True):
    """Hand the command ``sides`` (SideOptions, when it takes them) and ``measure`` (MeasureOptions) in
    place of their separate options. Put it right above the ``def``, under the click options.
    ``budget_plans``: False where --budget bounds a job of many compares (config.load_config)."""

    def decorate(f):
        wants_sides = "sides" in inspect.signature(f).parameters  # run's --python is its own side's

        @functools.wraps(f)
        def command(**kwargs):
            sides = take_sides(kwargs) if wants_sides else None
            measure = kwargs["measure"] = take_measure(kwargs, default_config, budget_plans)
            if wants_sides:  # a repo of several modules: the one the config's factories import is under test
                kwargs["sides"] = dataclasses.replace(sides, package_hint=measure.config.factory_package)
            return f(**kwargs)

        return command

    return decorate


def take_sides(kwargs: dict) -> SideOptions:
    given = {name: kwargs.pop(name) for name in SIDE_FIELDS if name in kwargs}
    command = given.get("build_command")
    given["build_command"] = tuple(shlex.split(command)) if command else None
    return SideOptions(**given)


def unused_processes(config) -> str | None:
    """A line when --processes was typed but --precision decides the pairs (docs/measuring.md): the flag
    would otherwise be dropped without a word."""
    s = config.schedule
    if "processes" not in config.from_cli or (s.kind != "auto" and s.precision_pct is None):
        return None
    if s.precision_pct is None:
        return (
            f"--processes {s.processes} is not used: the schedule plans itself (--schedule auto) and runs "
            f"until the budget of {s.budget_s:g} s ends; add --schedule fixed to run {s.processes} pairs"
        )
    return (
        f"--processes {s.processes} is not used: with {config.option('precision_pct')} {s.precision_pct:g} "
        f"the pairs run until every cell is within +-{s.precision_pct:g}% (at least {s.min_pairs} pairs) or "
        f"the budget ends; leave --processes out, or leave out --precision to run {s.processes} pairs"
    )


def take_measure(kwargs: dict, default_config: str = "default", budget_plans: bool = True) -> MeasureOptions:
    """--config, the config keys' flags, --counters, --sweep, --fail-on, --format and --results-dir."""
    from teperf.verdicts import parse_fail_on

    fail_on = frozenset(parse_fail_on(kwargs.pop("fail_on", None)))
    config = make_config(kwargs, default_config, budget_plans, counters=kwargs.pop("counters", None))
    if (note := unused_processes(config)) is not None:
        stderr_log(note)
    swept = None
    if sweep := kwargs.pop("sweep", None):
        from teperf.sweep import apply, parse_sweep

        swept = parse_sweep(sweep)
        config = apply(config, swept)
    return MeasureOptions(
        config=config,
        results_dir=kwargs.pop("results_dir", None),
        fmt=kwargs.pop("fmt", "table"),
        sweep=swept,
        fail_on=fail_on,
    )


def counters_option(
    default: bool, help: str = "Count python calls, ATen ops, ... per step, once, outside the timed trials."
):
    """--counters/--no-counters: the config's ``counters`` key, whose default each command chooses."""
    return click.option("--counters/--no-counters", default=default, show_default=True, help=help)


def sweep_option(
    help: str = "Measure every value of a module kwarg (num_gemms=1,2,4,8) or shape dimension (dim0=64,128) "
    "as its own cell; then print the host-time slope per unit.",
):
    return click.option("--sweep", metavar="KEY=V1,V2,...", help=help)


fail_on_option = click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    metavar="VERDICT",
    help="Exit 1 when any cell has this verdict, per step or one-time (first call, recompile): slower, "
    "faster, change (either), inconclusive; repeat or join with commas.",
)


def gate(summary, verdicts: set) -> None:
    """--fail-on: exit 1, naming the cells in one line on stderr, when any cell has one of ``verdicts``."""
    from teperf.verdicts import failing_cells

    if verdicts and (cells := failing_cells(summary.rows, verdicts)):
        plural = "s" if len(cells) != 1 else ""
        click.echo(f"teperf: fail-on: {len(cells)} cell{plural}: {'; '.join(cells)}", err=True)
        sys.exit(1)


def report_extras(summary, extras, measure: MeasureOptions) -> None:
    """Print the steps after measuring (api.Extras), then exit 1 on --fail-on or moved counters."""
    for text in extras.texts():  # json/csv: on stderr, so that stdout parses
        click.echo(text, err=measure.fmt in ("json", "csv"), nl=False)
    gate(summary, measure.fail_on)
    if not extras.passed:
        sys.exit(1)


def format_option(renderers, default: str = "table", **kwargs):
    """--format, its choices the keys of a renderer registry (teperf.render.RENDERERS and the like)."""
    return click.option(
        "--format", "fmt", type=click.Choice(list(renderers)), default=default, show_default=True, **kwargs
    )


def output_options(f):
    f = click.option("--results-dir", metavar="DIR", help="Where bundles go.", show_default="./results")(f)
    return format_option(RENDERERS, help="Output format.")(f)


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def print_table(columns: str, rows, right=(), title: str | None = None) -> None:
    """A table of ``columns`` ('|' between names); each cell text or (text, style), never read as rich
    markup (commit subjects and paths are anyone's text)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, header_style="bold")
    for col in columns.split("|"):
        table.add_column(col, justify="right" if col in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*(Text(*cell) if isinstance(cell, tuple) else Text(cell) for cell in row))
    _console().print(table)


def tty_progress(prefix: str):
    """A progress callback: ``prefix: what`` on stderr, on a terminal only."""
    return lambda what: click.echo(f"{prefix}: {what}", err=True) if sys.stderr.isatty() else None


def echo_rendered(render_fn, *args) -> None:
    """Print what ``render_fn(*args, console=...)`` returns (None: it printed on the console itself)."""
    if (text := render_fn(*args, console=_console())) is not None:
        click.echo(text, nl=False)


def emit(summary, fmt: str) -> None:
    echo_rendered(render, summary, fmt)


def _preload_report() -> None:
    """Import what the summary and the table import lazily, before measuring: a Ctrl-C that lands
    inside an import leaves that module half-imported, and printing what was measured then fails."""
    import rich.markup  # noqa: F401
    import rich.table  # noqa: F401

    import teperf.explain.render  # noqa: F401
    import teperf.schema  # noqa: F401
    from teperf.stats import preload

    preload()


def measure_and_report(fn, measure: MeasureOptions, *sides):
    """Measure ``sides`` with ``fn`` (api.run, api.compare) in the live view, print the summary and exit
    with the status a CI relies on (teperf.errors): 1 when a cell failed or ended partial, 130/143
    on Ctrl-C/SIGTERM (after printing what was measured)."""
    from teperf.api import summarize
    from teperf.engine.hints import failure_hint
    from teperf.errors import DiskFull, Interrupted

    _preload_report()
    try:
        with live_view() as (progress, live):
            path = fn(
                measure.config,
                *sides,
                results_dir=measure.results_dir,
                command=["teperf"] + sys.argv[1:],
                progress=progress,
                live=live,
            )
    except Interrupted as stop:
        click.echo(
            f"teperf: {stopped_by(stop.signum)}; the bundle keeps what was measured: {stop.path}", err=True
        )
        emit(summarize(stop.path), measure.fmt)
        sys.exit(exit_status_for_signal(stop.signum))
    except DiskFull as full:  # the table of what was measured first, then the one line (exit 1)
        with contextlib.suppress(TeperfError, OSError):
            emit(summarize(full.path), measure.fmt)
        raise
    summary = summarize(path)
    emit(summary, measure.fmt)
    for problem in summary.code_problems:  # a CI job must not read this as a clean result
        click.echo(
            for_terminal(f"teperf: {problem}; check what each side points at (bundle: {path})"), err=True
        )
    if bad := summary.incomplete_rows:
        first = summary.meta.error or next((r.error for r in bad if r.error), "") or ""
        measured = [r for r in summary.rows if r.status != "skipped"]
        every = "every cell" if len(bad) == len(measured) else f"{len(bad)} cell(s)"
        hint = f"{failure_hint(first)} (worker logs: {path}/workers/)"
        budget = summary.config.known("schedule.budget_s")
        if not first and all(r.status == "missing" for r in bad):  # nothing failed: never measured
            first = "no trial of them was measured" + (f" within the {budget:g} s budget" if budget else "")
            hint = "raise --budget (it includes the first pair's start)" if budget else f"see {path}/workers/"
        click.echo(for_terminal(f"teperf: {every} failed or ended partial ({first[:300]}); {hint}"), err=True)
    if bad or summary.code_problems:
        sys.exit(EXIT_CELLS_FAILED)
    return summary
