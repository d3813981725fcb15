"""``teperf cache list|clear``: git trees, overlay trees and builds kept between runs."""

from __future__ import annotations

import json
import time

import click

from teperf.commands._common import Number, format_option
from teperf.sides import cachedir

_cache_dir_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Cache root (default: $TEPERF_CACHE, else ~/.cache/teperf).",
)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _what(entry: cachedir.Entry) -> str:
    meta = entry.meta
    if entry.kind == "trees":
        return f"{str(meta.get('sha', entry.key))[:10]} {meta.get('subject', '')}".strip()
    if entry.kind == "overlays":
        return (
            f"{meta.get('package') or '?'} @ {str(meta.get('sha') or '?')[:10]} {meta.get('subject') or ''}"
        ).strip()
    if entry.kind == "ccache":
        return "compiler cache (ccache) shared by every build"
    if entry.kind == "buildtrees":
        return f"build directory of {meta.get('repo', '?')}, last {str(meta.get('sha', '?'))[:10]}"
    status = "ok" if meta.get("ok") else f"FAILED (exit {meta.get('returncode')})" if meta else "incomplete"
    kind = {"ext": " extension", "cores": " core library"}.get(entry.kind, "")
    what = f"{meta.get('package', '?')}{kind}"
    return f"{what} from {str(meta.get('sha', '?'))[:10]}, {status}, {meta.get('seconds', '?')}s"


@click.group("cache")
def command():
    """Show or clear teperf's cache of git trees, overlays, builds, build directories and extensions."""


def _list_json(root, found) -> None:
    keys = ("kind", "key", "path", "size", "mtime", "complete", "meta")
    entries = [{k: getattr(e, k) for k in keys} for e in found]  # the paths as strings by default=str
    click.echo(json.dumps({"root": str(root), "entries": entries}, indent=2, default=str))


def _list_table(root, found) -> None:
    if not found:
        click.echo(f"cache {root}: empty")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"teperf cache {root}", title_justify="left")
    for name in ("kind", "key", "what", "size", "last used"):
        table.add_column(name, justify="right" if name == "size" else "left", overflow="fold")
    for e in found:
        table.add_row(
            e.kind,
            e.key[:24],
            _what(e) if e.complete or e.kind == "builds" else "(incomplete)",
            _size(e.size),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(e.mtime)),
        )
    console = Console()
    console.print(table)
    console.print(f"{len(found)} entries, {_size(sum(e.size for e in found))}")


RENDERERS = {"table": _list_table, "json": _list_json}  # fmt -> fn(root, entries), prints


@command.command("list")
@_cache_dir_option
@format_option(RENDERERS)
def list_(cache_dir, fmt):
    """List the cached git trees, overlay trees and builds."""
    RENDERERS[fmt](cachedir.cache_root(cache_dir), cachedir.entries(cache_dir))


@command.command("clear")
@_cache_dir_option
@click.argument("kinds", nargs=-1, type=click.Choice(list(cachedir.KINDS)))
@click.option(
    "--older-than", type=Number(0), default=None, metavar="DAYS", help="Only entries not used for DAYS days."
)
def clear(cache_dir, kinds, older_than):
    """Remove cached entries: all, or only KINDS (trees, overlays, builds, buildtrees, ext, cores, ccache)."""
    root = cachedir.cache_root(cache_dir)
    done = cachedir.clear(
        cache_dir, kinds or cachedir.KINDS, older_than_s=None if older_than is None else older_than * 86400
    )
    freed = sum(e.size for e in done.removed)
    click.echo(f"cache {root}: removed {len(done.removed)} entries ({_size(freed)})")
    if done.in_use:
        click.echo(
            f"cache {root}: kept {len(done.in_use)} in use by a running teperf (clear again when it has "
            f"ended): {', '.join(f'{e.kind}/{e.key[:24]}' for e in done.in_use)}"
        )
