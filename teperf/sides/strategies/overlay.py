"""overlay: each side's ``.py`` files over the installed build of the package (seconds, no build), valid
when only ``.py`` files, version strings (a note: no compiled code reads them) and non-build files differ."""

from __future__ import annotations

import functools
from typing import Any, Mapping

from teperf.sides import Side, changes, gitrepo
from teperf.sides import installed as inst
from teperf.sides.gitrepo import Commit
from teperf.sides.shadow import ShadowSpec, shadow_side
from teperf.sides.strategy import Strategy
from teperf.sides.target import Plan, Refused


def version_notes(target, pair) -> tuple[str, ...]:
    """('build_tools/VERSION.txt: 2.16.0 -> 2.16.1 (...)',) when version files differ; () otherwise."""
    paths = pair.changes.paths(changes.VERSION)
    if not paths:
        return ()

    def value(commit: Commit, path: str) -> str:
        return (gitrepo.show_file(target.repo, commit.sha, path) or "").strip()[:40] or "(none)"

    shown = [f"{path}: {value(pair.base, path)} -> {value(pair.head, path)}" for path in paths[:3]]
    return (
        f"version strings differ ({changes.shorten([*shown, *paths[3:]], sep='; ')}); no compiled code reads "
        "them, so both sides run on the installed build and report its version",
    )


def overlay_side(
    strategy, label: str, commit: Commit, tree, description: Mapping[str, Any], *, key="", built=None, **files
) -> Side:
    """The side: its ``.py`` files (and ``files``: ShadowSpec's own_files, replaced) over the installed
    package of ``strategy.basis``; ``key`` ends the shadow tree's cache key, ``built`` its metadata."""
    t, basis = strategy.target, strategy.basis
    installed = basis.installed
    spec = ShadowSpec(
        package=t.package,
        installed_dir=installed.location,
        side_pkg_dir=t.side_pkg_dir(tree),
        key=f"{commit.sha[:16]}-{inst.fingerprint(installed.location, installed.sibling_libs)[:12]}{key}",
        known_py=basis.known_py,
        sibling_libs=installed.sibling_libs,
        **files,
    )
    description = {
        **description,
        "tree": str(tree),
        **basis.to_meta(),
        "changed_py": strategy.pair.changes.paths(changes.PYTHON),
        **(built or {}),
    }
    return shadow_side(label, spec, t, description)


class Overlay(Strategy):
    name = "overlay"
    help = (
        "each side's .py files over the installed build (seconds); only .py files and version strings differ"
    )
    tier = "overlay"
    te_seconds = other_seconds = 2.0

    @functools.cached_property
    def basis(self) -> inst.Basis:
        t, pair = self.target, self.pair
        if pair.changes.tier != "overlay":
            found = pair.changes.deciding()
            raise Refused(
                f"overlay cannot run base..head: build inputs of {t.package} differ between base "
                f"{pair.base.sha[:10]} and head {pair.head.sha[:10]} ({changes.shorten(found, 4)})",
                f"use --strategy {pair.changes.tier} (builds what differs from each side's tree, cached), "
                "or --strategy env with two installs",
            )
        return inst.basis(t, pair, strategy="overlay", tier="overlay")

    def plan(self) -> Plan:
        self.target.refuse_module(self.name)
        installed = self.basis.installed
        py = self.pair.changes.paths(changes.PYTHON)
        versions = self.pair.changes.paths(changes.VERSION)
        if py:
            also = " and version strings" if versions else ""
            reason = f"only .py files{also} differ ({len(py)}: {changes.shorten(py)})"
        else:
            reason = "only version strings differ" if versions else "no file of the package differs"
        version = installed.version or ""
        cost = f"seconds: its .py files over the installed {installed.package} {version}".rstrip()
        costs = tuple((label, cost) for label, _ in self.pair.sides())
        return Plan(self.name, reason, costs, version_notes(self.target, self.pair))

    def prepare(self, label: str, commit: Commit, description: Mapping[str, Any]) -> Side:
        return overlay_side(self, label, commit, self.tree(commit, package_only=True), description)
