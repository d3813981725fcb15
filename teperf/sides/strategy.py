"""The interface of every way of making git sides (teperf/sides/strategies/): made for one Target and one
Pair, it plans (or refuses) and then turns each commit into a runnable Side."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

from teperf.sides import Side, gitrepo
from teperf.sides.gitrepo import Commit
from teperf.sides.target import Pair, Plan, Target


class Strategy:
    name: ClassVar[str] = ""
    help: ClassVar[str] = ""  # one line for --help
    tier: ClassVar[str | None] = None  # the change tier ``auto`` uses it for (teperf.sides.changes.TIERS)
    cache_kind: ClassVar[str | None] = None  # where its builds are cached (their timings plan bisect)
    compiled: ClassVar[bool] = False  # bisect plans one build per distinct set of compiled inputs
    te_seconds: ClassVar[float] = 600.0  # making one TE commit runnable, before any was measured here
    other_seconds: ClassVar[float] = 60.0  # the same for any other package (mostly-Python trees build fast)
    parallel: ClassVar[bool] = False  # base and head made at the same time (independent builds)

    def __init__(self, target: Target, pair: Pair):
        self.target = target
        self.pair = pair

    def plan(self) -> Plan:
        """What will happen and what it costs; raises Refused when the strategy cannot run this pair."""
        raise NotImplementedError

    def prepare(self, label: str, commit: Commit, description: Mapping[str, Any]) -> Side:
        """The side for ``commit``; ``description`` (the commit's provenance) goes into its metadata."""
        raise NotImplementedError

    @classmethod
    def fits(cls, layout) -> bool:
        """Whether the package's layout describes what this strategy builds (auto skips it if not)."""
        return True

    # helpers for the implementations

    def tree(self, commit: Commit, *, submodules: bool = False, package_only: bool = False) -> Path:
        """The commit's files; ``package_only``: the package's directory is all the side uses (path and
        overlay tiers), so objects missing elsewhere (a partial mirror) do not stop it."""
        t = self.target
        needs = (gitrepo.prefix(t.package_dir).rstrip("/") or None) if package_only else None
        return gitrepo.materialize(
            t.repo, commit.sha, cache_dir=t.opts.cache_dir, submodules=submodules, needs=needs
        )
