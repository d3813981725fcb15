"""The strategies by name: the one list the CLI (compare, nightly) and ``auto`` use."""

from __future__ import annotations

from teperf.errors import TeperfError

HELP = {
    "auto": "pick the cheapest from the git diff: overlay, extension, core or build (path for a pure-Python package)",
    "overlay": "each side's .py files over the installed build (seconds); only .py files and version strings differ",
    "extension": "rebuild only the framework extension (TE: transformer_engine/pytorch) from each side's tree, "
    "over the installed core library; cached",
    "core": "rebuild the core library (CMake, one shared incremental Ninja tree) and the extension from each "
    "side's tree, over the installed package; cached per core sources, ccache if installed",
    "build": "build everything from each side's tree in one persistent, incremental build directory (ccache if "
    "installed); cached per compiled sources",
    "path": "put each side's tree first on sys.path (a pure-Python package, nothing to build)",
    "env": "no git refs: the sides are two environments (--base-python/--head-python or --base-path/--head-path)",
}
NAMES = tuple(HELP)
GIT_NAMES = tuple(n for n in NAMES if n != "env")  # strategies that make sides from git refs


def help_text(names=NAMES) -> str:
    return "; ".join(f"{n}: {HELP[n]}" for n in names)


def get(name: str):
    """The Strategy class for a name (not 'auto', which chooses one)."""
    from teperf.sides.strategies.build import Build
    from teperf.sides.strategies.core import Core
    from teperf.sides.strategies.env import Env
    from teperf.sides.strategies.extension import Extension
    from teperf.sides.strategies.overlay import Overlay
    from teperf.sides.strategies.path import PathStrategy

    classes = {c.name: c for c in (Overlay, Extension, Core, Build, PathStrategy, Env)}
    if name not in classes:
        raise TeperfError(f"unknown strategy {name!r}", f"use one of {', '.join(NAMES)}")
    return classes[name]
