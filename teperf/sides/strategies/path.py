"""path: each side's tree first on sys.path, as it is in git (a pure-Python package: nothing to build)."""

from __future__ import annotations

from typing import Any, Mapping

from teperf.sides import Side, changes, gitrepo
from teperf.sides.gitrepo import Commit
from teperf.sides.strategy import Strategy
from teperf.sides.target import Plan, Refused


class PathStrategy(Strategy):
    name = "path"
    help = "put each side's tree first on sys.path (a pure-Python package, nothing to build)"
    te_seconds = other_seconds = 1.0

    def _import_root(self) -> str:
        """The directory (relative to the tree) that holds the package directory: what goes on sys.path."""
        pkg = self.target.package_dir.strip("/")
        if self.target.module_file:  # one module (model.py): the directory that holds it
            return pkg.rpartition("/")[0]
        if not gitrepo.prefix(pkg):
            raise Refused(
                f"--strategy path needs {self.target.package} in a directory of that name or a module "
                f"{self.target.package}.py, not the repo root as the package",
                "pass --package-dir (the package's directory, or the one holding the module), "
                "or use --strategy overlay or build",
            )
        parent, _, name = pkg.rpartition("/")
        if name != self.target.package.split(".")[0]:
            raise Refused(
                f"the package directory {pkg} is not named {self.target.package}",
                "pass --package NAME matching the directory, or use --strategy overlay or build",
            )
        return parent

    def plan(self) -> Plan:
        self._import_root()
        changed = self.pair.changes.paths(
            changes.PYTHON, changes.VERSION, changes.EXTENSION, changes.CORE, changes.BUILD
        )
        n = len(self.pair.changes.items)
        reason = f"the package has nothing to build; {n} file{'s differ' if n != 1 else ' differs'}" + (
            f" ({changes.shorten(changed)})" if changed else ""
        )
        costs = tuple((label, "seconds: its tree on sys.path") for label, _ in self.pair.sides())
        return Plan(self.name, reason, costs)

    def prepare(self, label: str, commit: Commit, description: Mapping[str, Any]) -> Side:
        tree = self.tree(commit, package_only=True)
        parent = self._import_root()
        root = tree / parent if parent else tree
        return Side(
            label=label,
            python=self.target.python,
            sys_path=(str(root),),
            description={**description, "tree": str(tree)},
        )
