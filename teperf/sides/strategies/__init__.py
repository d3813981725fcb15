"""The strategies: the one list the CLI (compare, bisect, nightly), ``auto`` and bisect's plan use."""

from __future__ import annotations

from teperf.errors import TeperfError
from teperf.sides.strategies.build import Build
from teperf.sides.strategies.core import Core
from teperf.sides.strategies.env import Env
from teperf.sides.strategies.extension import Extension
from teperf.sides.strategies.overlay import Overlay
from teperf.sides.strategies.path import PathStrategy

CLASSES = (Overlay, Extension, Core, Build, PathStrategy, Env)  # in the order --help lists them

*_tiered, _last_tiered = [c.name for c in CLASSES if c.tier]

HELP = {
    "auto": f"pick the cheapest from the git diff: {', '.join(_tiered)} or {_last_tiered} "
    "(path for a pure-Python package)",
    **{c.name: c.help for c in CLASSES},
}
NAMES = tuple(HELP)
GIT_NAMES = tuple(n for n in NAMES if n != Env.name)  # strategies that make sides from git refs


def help_text(names=NAMES) -> str:
    return "; ".join(f"{n}: {HELP[n]}" for n in names)


def get(name: str):
    """The Strategy class for a name (not 'auto', which chooses one)."""
    classes = {c.name: c for c in CLASSES}
    if name not in classes:
        raise TeperfError(f"unknown strategy {name!r}", f"use one of {', '.join(NAMES)}")
    return classes[name]


def for_tier(tier: str, layout=None) -> tuple[str, ...]:
    """What ``auto`` tries for a change tier, cheapest first: the strategies made for it (those the
    package's layout describes, when given), then a whole build."""
    names = [c.name for c in CLASSES if c.tier == tier and (layout is None or c.fits(layout))]
    return tuple(dict.fromkeys([*names, Build.name]))
