"""teperf doctor: read-only checks of the measuring machine. Exit 1 only when a check failed (with
--strict: or warned): warnings and unknowns are advice, as a cloud VM without cpufreq files can measure."""

from __future__ import annotations

import json
import sys

import click

from teperf.commands._common import _console, format_option, interpreter, print_table

STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "unknown": "dim"}


def _print_text(core, checks, verdict) -> None:
    rows = ((c.name, (c.status, STATUS_STYLE.get(c.status, "")), c.detail, c.fix) for c in checks)
    print_table("check|status|detail|fix", rows, title=f"teperf doctor (core {core})")
    style = STATUS_STYLE.get(verdict, "")
    _console().print(f"overall: [{style}]{verdict}[/] (doctor only reads; it never changes a setting)")


def _print_json(core, checks, verdict) -> None:
    report = {"core": core, "verdict": verdict, "checks": [c.to_dict() for c in checks]}
    click.echo(json.dumps(report, indent=2))


RENDERERS = {"text": _print_text, "json": _print_json}  # fmt -> fn(core, checks, verdict), prints


@click.command("doctor")
@click.option(
    "--core",
    type=int,
    help="The core you will pin workers to (default: the last usable one, as compare does); one this machine "
    "lacks is refused (exit 2).",
)
@click.option(
    "--python",
    "pythons",
    multiple=True,
    metavar="EXE",
    callback=interpreter,
    help="Also report Python/torch/TE versions of this side interpreter; repeatable.",
)
@format_option(RENDERERS, default="text")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too, not only on failures.")
def command(core, pythons, fmt, strict):
    """Check CPU frequency, core isolation, ASLR, load, versions and GPU; change nothing."""
    from teperf.cpus import check_core, default_core
    from teperf.doctor import all_checks, worst

    # compare's default, seen without claiming it (doctor changes nothing), or the given core refused (exit 2)
    core = default_core(claim=False) if core is None else check_core(core)
    checks = all_checks(core, tuple(pythons))
    verdict = worst(checks)
    RENDERERS[fmt](core, checks, verdict)
    if verdict == "fail" or (strict and verdict == "warn"):
        sys.exit(1)
