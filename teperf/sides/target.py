"""What every strategy works from: what is measured (Target), which two commits (Pair), the plan; apart so
that the strategies, ``auto`` and the entry point share them without importing each other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from teperf.errors import TeperfError
from teperf.log import Log, stderr_log
from teperf.options import SideOptions
from teperf.sides.changes import Changes
from teperf.sides.gitrepo import Commit
from teperf.sides.layout import PackageLayout


class Refused(TeperfError):
    """A strategy cannot make this pair's sides; ``problem`` says why (auto then tries the next tier)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """What is measured and where things go: the same for both sides."""

    repo: Path
    package: str
    package_dir: str  # the package's directory inside the repo ('.' = the repo root), or a module's file
    layout: PackageLayout
    opts: SideOptions = SideOptions()  # how sides are made: the interpreter, cache, build options
    log: Log = stderr_log

    @property
    def python(self) -> str:
        """Runs the workers; holds the installed package; builds."""
        return self.opts.interpreter

    @property
    def module_file(self) -> bool:
        """The code under test is one module file (nanoGPT's ``model.py``), not a package directory."""
        return self.package_dir.endswith(".py")

    def refuse_module(self, strategy: str) -> None:
        """Strategies that overlay or build a package directory cannot take a single module."""
        if self.module_file:
            raise Refused(
                f"--strategy {strategy} needs a package directory; {self.package} is a single module "
                f"({self.package_dir})",
                "use --strategy path (each side's tree on sys.path), or auto",
            )

    def side_pkg_dir(self, tree: Path) -> Path:
        return tree / self.package_dir.strip("/")  # pathlib drops a "." or "" part


@dataclasses.dataclass(frozen=True)
class Pair:
    """The two commits compared and what differs between them."""

    base: Commit
    head: Commit
    changes: Changes

    def sides(self) -> tuple[tuple[str, Commit], tuple[str, Commit]]:
        return ("base", self.base), ("head", self.head)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a strategy will do for a pair, said before it does it."""

    strategy: str
    reason: str  # why this tier, naming the deciding files
    costs: tuple[tuple[str, str], ...]  # (label, expected cost) per side
    notes: tuple[str, ...] = ()  # recorded in both sides' metadata (e.g. a version-only difference)

    def lines(self) -> list[str]:
        out = [f"strategy {self.strategy}: {self.reason}"]
        out += [f"  {label}: {cost}" for label, cost in self.costs]
        out += [f"  note: {note}" for note in self.notes]
        return out
