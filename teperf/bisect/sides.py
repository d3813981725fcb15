"""The one seam between bisect and teperf/sides: commit SHA -> runnable Side, and what that costs.

Everything bisect needs from the git/side machinery goes through this file,
so that a change of that machinery (issue 10's strategy interface) is a
change here only. A commit that cannot be made runnable (its build fails,
its tree lacks the package) raises ProbeSkipped: bisect then tries a
neighbour, as ``git bisect skip`` does.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Callable, Protocol

from teperf.errors import TeperfError
from teperf.sides import Side
from teperf.sides.git import (  # noqa: F401  (re-exported: bisect's git helpers)
    Commit, GitFailed, commit_info, find_package_dir, parse_spec, repo_root, resolve, run_git,
)

# Rough cost of making one commit runnable, per tier (seconds), for the plan printed up front.
# overlay: a shadow tree of symlinks; build: TE's full build is minutes (../shared/gpu/README.md).
TIER_SECONDS = {"overlay": 2.0, "extension": 90.0, "build": 600.0}


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
    """Sides from the same machinery as ``teperf compare A..B`` (tiers, caches)."""

    repo: str
    package: str = "transformer_engine"
    package_dir: str | None = None
    strategy: str = "auto"
    python: str = sys.executable
    cache_dir: str | None = None
    build_command: list[str] | None = None
    log: Callable[[str], None] | None = None

    def _package_dir(self, sha: str) -> str:
        if self.package_dir is None:
            found = find_package_dir(self.repo, sha, self.package)
            if found is None:
                raise TeperfError(
                    f"no {self.package}/__init__.py in {sha[:10]} of {self.repo}",
                    "pass --package NAME (the import name under test) and --package-dir PATH if it lives elsewhere",
                )
            self.package_dir = found.strip("/") or "."
        return self.package_dir

    def sides(self, base_sha: str, head_sha: str) -> tuple[Side, Side]:
        from teperf.sides.git import git_sides

        for attempt in range(3):
            try:
                return git_sides(
                    f"{base_sha}..{head_sha}", repo=self.repo, strategy=self.strategy, package=self.package,
                    package_dir=self._package_dir(base_sha), python=self.python, cache_dir=self.cache_dir,
                    build_command=self.build_command, allow_dirty=True, log=self.log,
                )
            except TeperfError as exc:
                raise ProbeSkipped(exc.one_line()) from None
            except GitFailed as exc:
                # main's git archive reader can stop before git has written its padding (SIGPIPE, -13);
                # issue 10 drains the pipe. The half-made tree is removed, so trying again is safe.
                if exc.returncode != -13 or attempt == 2:
                    raise ProbeSkipped(str(exc)) from None
        raise AssertionError("unreachable")

    def tier(self, base_sha: str, head_sha: str) -> str:
        from teperf.sides.overlay import blockers

        if self.strategy not in ("auto",):
            return self.strategy
        return "build" if blockers(self.repo, base_sha, head_sha, self._package_dir(base_sha)) else "overlay"
