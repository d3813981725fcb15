"""env: two existing environments; named here so the CLI lists it, but it makes no sides from git refs."""

from __future__ import annotations

from teperf.errors import TeperfError
from teperf.sides.strategy import Strategy


class Env(Strategy):
    name = "env"
    help = (
        "no git refs: the sides are two environments (--base-python/--head-python or --base-path/--head-path)"
    )

    def plan(self):
        raise TeperfError(
            "--strategy env takes no git refs",
            "give the sides with --base-python/--head-python or --base-path/--head-path "
            "instead of a ref spec",
        )
