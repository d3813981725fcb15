"""teperf compare: base vs head, paired and interleaved."""

from __future__ import annotations

import sys

import click

from teperf.commands._common import EXIT_STATUS_HELP, config_options, make_config, measure_and_report, output_options
from teperf.errors import TeperfError


@click.command("compare", epilog=EXIT_STATUS_HELP)
@click.argument("spec", required=False, metavar="[BASE..HEAD]")
@click.option("--repo", default=".", show_default=True, metavar="DIR", help="Git repository the refs are in.")
@click.option("--strategy", type=click.Choice(["auto", "overlay", "build", "env"]), default="auto", show_default=True, help="How a git side is made runnable.")
@click.option("--package", default="transformer_engine", show_default=True, help="Package under test (for overlay/build).")
@click.option("--package-dir", metavar="PATH", help="The package's directory inside the repo (default: found by name).")
@click.option("--build-command", metavar="CMD", help="Build command for --strategy build (default: pip install into a per-side prefix).")
@click.option("--cache-dir", metavar="DIR", help="Where git trees, overlays and builds are cached (default: $TEPERF_CACHE or ~/.cache/teperf).")
@click.option("--allow-dirty", is_flag=True, default=None, help="Measure a checked-out side even with uncommitted changes in the package.")
@click.option("--base-path", metavar="DIR", help="Directory put first on the base worker's sys.path.")
@click.option("--head-path", metavar="DIR", help="Directory put first on the head worker's sys.path.")
@click.option("--base-python", metavar="EXE", help="Interpreter for the base side (e.g. a virtualenv's python).")
@click.option("--head-python", metavar="EXE", help="Interpreter for the head side.")
@click.option("--counters/--no-counters", default=True, show_default=True, help="Count python calls, ATen ops, ... per step, once, outside the timed trials.")
@click.option("--explain", "explain_cell", metavar="MODULE/RECIPE", help="Afterwards, profile this cell on both sides and show where the delta comes from.")
@config_options
@output_options
def command(spec, repo, strategy, package, package_dir, build_command, cache_dir, allow_dirty, base_path, head_path, base_python, head_python, counters, explain_cell, fmt, results_dir, **kwargs):
    """Compare two sides: git refs (BASE..HEAD), directories or interpreters.

    \b
    teperf compare main..my-branch --repo ~/TransformerEngine
    teperf compare --base-path old/ --head-path new/
    teperf compare --base-python venv-a/bin/python --head-python venv-b/bin/python
    """
    from teperf import api

    config = make_config(kwargs, counters=counters)
    if explain_cell:  # checked now, not after minutes of measuring
        from teperf.explain import find_case
        from teperf.plan import expand

        find_case({"cases": [c.to_meta() for c in expand(config)]}, explain_cell)
    side_opts = (base_path, head_path, base_python, head_python)
    if spec:
        if base_path or head_path:
            raise TeperfError("BASE..HEAD and --base-path/--head-path both given", "use one way to name the sides")
        import shlex

        from teperf.sides.git import git_sides

        python = base_python or head_python or sys.executable
        base, head = git_sides(
            spec,
            repo=repo,
            strategy=strategy,
            package=package,
            package_dir=package_dir,
            python=python,
            cache_dir=cache_dir,
            build_command=shlex.split(build_command) if build_command else None,
            allow_dirty=allow_dirty,
        )
    elif any(side_opts):
        base = api.path_side("base", base_path, base_python)
        head = api.path_side("head", head_path, head_python)
    else:
        raise TeperfError("nothing to compare", "give BASE..HEAD (git refs), or --base-path/--head-path, or --base-python/--head-python")
    summary = measure_and_report(
        lambda progress: api.compare(config, base, head, results_dir=results_dir, command=["teperf"] + sys.argv[1:], progress=progress),
        fmt,
    )
    if explain_cell:
        from teperf.explain import explain_bundle, render_report

        # on stderr when stdout carries json/csv, so that it stays parseable
        click.echo(render_report(explain_bundle(summary.path, explain_cell)), err=fmt in ("json", "csv"))
