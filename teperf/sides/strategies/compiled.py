"""What the strategies that compile part of the package over the installed build share (extension, core).

Each build is cached in ``<cache>/<kind>/<key>/`` (its output directory, ``build.log``, ``build.json``),
keyed by what it is built from; the plan says per side whether a build is reused, made by the other side
or made here; the side is a shadow tree: its ``.py`` files and its own built files over the installed
package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from teperf.sides import Side, cachedir, changes
from teperf.sides import installed as inst
from teperf.sides.gitrepo import Commit
from teperf.sides.shadow import ShadowSpec, shadow_side
from teperf.sides.strategy import Strategy


class CompiledStrategy(Strategy):
    compiled = True

    def build_meta(self, key: str, commit, n_files: int, **more) -> dict:
        """A build's build.json before it runs: what was built from which tree, then ``more``."""
        t = self.target
        ids = {"key": key, "sha": commit.sha, "repo": str(t.repo), "package": t.package}
        return {"ok": False, **ids, "layout": t.layout.name, "hashed_files": n_files, **more}

    def cached(self, kind: str, key: str, output: str) -> dict:
        """The build.json of a finished build of ``key`` ({} when there is none)."""
        home = cachedir.kind_dir(kind, self.target.cache_dir) / key
        meta = cachedir.read_json(home / cachedir.BUILD_META)
        return meta if meta.get("ok") and (home / output).is_dir() else {}

    def last_seconds(self, kind: str, full_only: bool = False) -> float | None:
        """The slowest earlier build of this layout (``full_only``: that rebuilt every step)."""
        times = [
            e.meta.get("seconds")
            for e in cachedir.entries(self.target.cache_dir, kinds=(kind,), sizes=False)
            if e.complete
            and e.meta.get("layout") == self.target.layout.name
            and (not full_only or e.meta.get("steps_rebuilt") == e.meta.get("steps_total"))
            and e.meta.get("seconds")
        ]
        return max(times) if times else None

    def side_costs(
        self, key_of: Callable, is_cached: Callable, product: str, same: str, fresh: Callable[[], str]
    ) -> list[tuple[str, str]]:
        """(label, cost) per side: reused from the cache, built by the other side (the same ``same``), or
        ``fresh()``."""
        costs, planned = [], {}  # key -> the side that builds it
        for label, commit in self.pair.sides():
            key, _ = key_of(commit)
            if is_cached(key):
                cost = f"{product} reused from the cache ({key[:12]})"
            elif key in planned:
                cost = f"the {product} {planned[key]} builds (the same {same})"
            else:
                cost = fresh()
            planned.setdefault(key, label)
            costs.append((label, cost))
        return costs

    def ensure_built(
        self, kind: str, key: str, output: str, label: str, commit: Commit, product: str, make: Callable
    ) -> dict:
        """The build.json of ``key``'s build (plus 'reused'): from the cache, else ``make(home, out,
        log_path)`` builds it into ``out`` (emptied) and returns its build.json."""
        t = self.target
        builds = cachedir.kind_dir(kind, t.cache_dir)
        home = builds / key
        with cachedir.locked(builds / f"{key}.lock"):
            cachedir.hold(home)
            meta = self.cached(kind, key, output)
            if meta:
                cachedir.touch(home)
                t.log(f"{label} {commit.sha[:10]}: {product} reused from the cache ({home})")
                return {**meta, "reused": True}
            home.mkdir(parents=True, exist_ok=True)
            out, log_path = home / output, home / "build.log"
            for stale in (out, log_path):
                cachedir.remove_tree(stale)
            out.mkdir()
            return {**make(home, out, log_path), "reused": False}

    def shadow(
        self,
        label: str,
        commit: Commit,
        tree: Path,
        description: Mapping[str, Any],
        *,
        own_files: Mapping[str, str],
        replaced: tuple[str, ...],
        key: str,
        built: Mapping[str, Any],
    ) -> Side:
        """The side: ``own_files`` (package-relative path -> built file) and the side's ``.py`` files over
        the installed package; ``key`` names the builds in the shadow tree's cache key, ``built`` goes into
        the side's metadata."""
        t, basis = self.target, self.basis
        installed = basis.installed
        spec = ShadowSpec(
            package=t.package,
            installed_dir=installed.location,
            side_pkg_dir=t.side_pkg_dir(tree),
            key=f"{commit.sha[:16]}-{inst.fingerprint(installed.location, installed.sibling_libs)[:12]}{key}",
            known_py=basis.known_py,
            sibling_libs=installed.sibling_libs,
            own_files=own_files,
            replaced=replaced,
        )
        description = {
            **description,
            "tree": str(tree),
            **basis.to_meta(),
            "changed_py": self.pair.changes.paths(changes.PYTHON),
            "changed_extension": self.pair.changes.paths(changes.EXTENSION),
            **built,
        }
        side = shadow_side(label, spec, python=t.python, cache_dir=t.cache_dir, description=description)
        self.check_loads(label, Path(side.sys_path[0]))
        return side

    def check_loads(self, label: str, root: Path) -> None:
        """Refuse a side whose built code does not load (TeperfError)."""
