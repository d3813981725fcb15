"""The one seam between bisect and teperf/sides: commit SHA -> runnable Side (or ProbeSkipped), its cost."""

from __future__ import annotations

import dataclasses
from typing import Callable, Protocol

from teperf.errors import TeperfError
from teperf.log import stderr_log
from teperf.options import SideOptions
from teperf.sides import Side, cachedir, changes, strategies
from teperf.sides import installed as inst
from teperf.sides.git import find_package, plan_sides
from teperf.sides.layout import layout_for
from teperf.sides.strategies import Core
from teperf.sides.target import Refused

TE_PACKAGE = "transformer_engine"


def strategy_class(tier: str):
    """The strategy that makes a commit of ``tier``; a tier no strategy is named after is a whole build."""
    try:
        return strategies.get(tier)
    except TeperfError:
        return strategies.get("build")


def tier_seconds(package: str, tier: str, cache_dir: str | None = None, layout: str | None = None):
    """(seconds, basis) of making one commit runnable with strategy ``tier``: the slowest of this package's
    builds in the cache ("measured"), else the strategy's figure for TE ("TE") or another package."""
    cls = strategy_class(tier)
    if cls.cache_kind:
        try:
            layout_name = layout_for(package, layout).name
        except TeperfError:
            layout_name = None
        # whole builds say their package, the others their layout
        key, want = ("package", package) if cls.cache_kind == "builds" else ("layout", layout_name)
        entries = cachedir.entries(cache_dir, kinds=(cls.cache_kind,), sizes=False)
        seconds = max(
            (e.meta.get("seconds") or 0 for e in entries if e.complete and e.meta.get(key) == want), default=0
        )
        if seconds:
            return float(seconds), "measured"
    return (cls.te_seconds, "TE") if package == TE_PACKAGE else (cls.other_seconds, "default")


def made_with(factory, tier: str) -> str:
    """The strategy that makes a commit of ``tier``: core for the build tier when pinned to it."""
    return Core.name if tier == Core.tier and getattr(factory, "pinned", None) == Core.name else tier


class ProbeSkipped(Exception):
    """This commit cannot be measured (build or import failure); ``reason`` is one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class SideFactory(Protocol):
    def sides(self, base_sha: str, head_sha: str) -> tuple[Side, Side]:
        """("base", "head") sides of two commits; ProbeSkipped when one cannot be made."""

    def tier(self, base_sha: str, head_sha: str) -> str:
        """The tier making ``head_sha`` runnable next to ``base_sha`` takes: overlay, extension or build."""


@dataclasses.dataclass
class GitSideFactory:
    """Sides from the same machinery and options as ``teperf compare A..B`` (sides.git.plan_sides)."""

    opts: SideOptions  # the git-side options, as compare takes them
    log: Callable[[str], None] = stderr_log
    pinned: str | None = None  # the strategy every side of the run is made with (pin_range)

    def __post_init__(self):  # found in the first commit asked about when not given
        self.package, self.package_dir = self.opts.package, self.opts.package_dir

    def pin_range(self, good_sha: str, bad_sha: str) -> str | None:
        """When GOOD..BAD needs compiled code, make every side of the run that way, GOOD's too: a wheel's
        extension against a local build puts the builds' difference into every delta."""
        tier = self.tier(good_sha, bad_sha) if self.opts.strategy == "auto" else None
        if tier not in ("extension", "build"):
            return None
        self.pinned = Core.name if tier == Core.tier and self._core_applies() else tier
        self.log(
            f"every side of this bisect is made with --strategy {self.pinned} (GOOD..BAD needs it): no side "
            "runs the installed build's compiled code while another runs a local build"
        )
        return self.pinned

    def _core_applies(self) -> bool:
        """Whether core fits (TE, installed): its shared Ninja tree makes each probe incremental."""
        try:
            if not Core.fits(layout_for(self.package or TE_PACKAGE, self.opts.layout)):
                return False
            inst.find_installed(self.package or TE_PACKAGE, self.opts.interpreter)
        except (TeperfError, Refused):
            return False
        return True

    def _package_dir(self, sha: str) -> str:
        if self.package is None or self.package_dir is None:  # found once, in the first commit asked about
            given = dataclasses.replace(self.opts, package=self.package)
            self.package, self.package_dir = find_package(self.opts.repo, (sha,), sha[:10], given, self.log)
        return self.package_dir

    def sides(self, base_sha: str, head_sha: str) -> tuple[Side, Side]:
        try:
            package_dir = self._package_dir(base_sha)  # first: it finds the package when not given
            return plan_sides(
                f"{base_sha}..{head_sha}",
                self.opts,
                strategy=self.pinned or self.opts.strategy,
                package=self.package,
                package_dir=package_dir,
                allow_dirty=True,
                log=self.log,
            ).make()
        except TeperfError as exc:  # refused, build failed, not importable: this commit cannot be measured
            raise ProbeSkipped(exc.one_line()) from None

    def seconds(self, tier: str) -> tuple[float, str]:
        """(seconds, basis) of making one commit of this package runnable in ``tier`` (tier_seconds)."""
        return tier_seconds(self.package, made_with(self, tier), self.opts.cache_dir, self.opts.layout)

    def tier(self, base_sha: str, head_sha: str) -> str:
        """From the git diff alone (no interpreter asked): what ``auto`` starts from."""
        if self.opts.strategy != "auto":
            return self.opts.strategy
        package_dir = self._package_dir(base_sha)
        if self._pure_python(base_sha, head_sha):
            return "path"
        layout = layout_for(self.package, self.opts.layout)
        return changes.diff(self.opts.repo, base_sha, head_sha, layout, package_dir).tier

    def _pure_python(self, base_sha: str, head_sha: str) -> bool:
        """Whether auto picks ``path`` (nothing compiled anywhere), decided once per run."""
        if not hasattr(self, "_path_tier"):
            try:
                given = dict(package=self.package, package_dir=self.package_dir, allow_dirty=True)
                planned = plan_sides(f"{base_sha}..{head_sha}", self.opts, log=lambda line: None, **given)
                self._path_tier = planned.strategy.name == "path"
            except TeperfError:
                self._path_tier = False
        return self._path_tier
