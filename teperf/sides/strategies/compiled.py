"""What the strategies that compile (build, extension, core) share: each build is cached in
``<cache>/<kind>/<key>/`` (its output, ``build.log``, ``build.json``), keyed by what it is built from."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from teperf.sides import buildrun, cachedir, gitrepo
from teperf.sides import installed as inst
from teperf.sides.gitrepo import Commit
from teperf.sides.layout import matches
from teperf.sides.strategy import Strategy
from teperf.sides.target import Refused

FIX = "read the log and fix the build (the next run tries again), or use --strategy build"


def tree_key(repo, sha: str, selected: Callable[[str, str], bool], recipe: Mapping) -> tuple[str, int]:
    """(cache key, files hashed) of the git objects ``selected(path, kind)`` picks and the ``recipe``."""
    h = hashlib.sha256()
    n = 0
    for mode, kind, obj, path in gitrepo.ls_tree(repo, sha):
        if selected(path, kind):
            h.update(f"{mode} {obj} {path}\0".encode(errors="surrogateescape"))
            n += 1
    h.update(json.dumps(recipe, sort_keys=True).encode())
    return h.hexdigest()[:20], n


def described(prefix: str, built: Mapping[str, Any], names: str) -> dict:
    """``<prefix>_<name>`` -> the build.json's ``name``, for a side's metadata ('from_sha': its 'sha')."""
    return {f"{prefix}_{name}": built.get("sha" if name == "from_sha" else name) for name in names.split()}


class CompiledStrategy(Strategy):
    compiled = True

    def inputs_key(self, commit: Commit, inputs, recipe: Mapping[str, Any]) -> tuple[str, int]:
        """tree_key of the commit's paths matching ``inputs`` but version files (unread by compiled code)."""

        def selected(path: str, _kind: str) -> bool:
            return matches(path, inputs) and not matches(path, self.target.layout.version_files)

        return tree_key(self.target.repo, commit.sha, selected, recipe)

    def buildtree(self, config: Mapping[str, Any], prefix: str = "") -> Path:
        """The persistent build directory of this repository and build ``config``."""
        data = json.dumps({"repo": str(self.target.repo), **config}, sort_keys=True)
        key = hashlib.sha256(data.encode()).hexdigest()[:16]
        return cachedir.kind_dir("buildtrees", self.target.opts.cache_dir) / f"{prefix}{key}"

    def installed_build(self, what: str) -> inst.Installed:
        """The installed package whose files the built ones replace (Refused, saying ``what``, if none)."""
        try:
            return inst.find_installed(self.target.package, self.target.python)
        except Refused as exc:
            raise Refused(
                f"{what}, but {exc.problem}",
                "install one build of the package into that interpreter, or use --strategy build",
            ) from None

    def build_env(self, **more) -> dict[str, str]:
        t, o = self.target, self.target.opts
        return buildrun.build_env(
            t.layout, jobs=o.jobs, cache_dir=o.cache_dir, python=t.python, cuda_archs=o.cuda_archs, **more
        )

    def build_meta(self, key: str, commit, n_files: int, **more) -> dict:
        """A build's build.json before it runs: what was built from which tree, then ``more``."""
        t = self.target
        ids = {"key": key, "sha": commit.sha, "repo": str(t.repo), "package": t.package}
        return {"ok": False, **ids, "layout": t.layout.name, "hashed_files": n_files, **more}

    def settle(
        self,
        home: Path,
        meta: dict,
        produced: bool,
        missing: str,
        building: str,
        product: str,
        fix: str = FIX,
    ) -> None:
        """Record a finished build's outcome in ``home``; raise BuildFailed (with the log's tail) when it
        failed, or exited 0 without the ``product`` it should leave (``missing`` says so in the log)."""
        log_path = home / "build.log"
        if meta.get("returncode") == 0 and not produced:
            with open(log_path, "a") as out:
                out.write(f"\nteperf: the build exited 0 but {missing}\n")
            meta["returncode"] = -1
        rc = meta.get("returncode")
        meta["ok"] = rc == 0
        cachedir.write_json(home / cachedir.BUILD_META, meta)
        if rc != 0:
            last = buildrun.tail(log_path)
            self.target.log(f"{building} failed; last lines of {log_path}:\n{last}")
            what = f"produced no {product}" if rc == -1 else f"failed with exit {rc}"
            raise buildrun.BuildFailed(f"{building} {what} (log: {log_path})", fix, log_path, last)

    def cached(self, kind: str, key: str, output: str) -> dict:
        """The build.json of a finished build of ``key`` ({} when there is none)."""
        home = cachedir.kind_dir(kind, self.target.opts.cache_dir) / key
        meta = cachedir.read_json(home / cachedir.BUILD_META)
        return meta if meta.get("ok") and (home / output).is_dir() else {}

    @functools.cached_property
    def python_path(self) -> str:
        """The workers' interpreter as a real path (part of build keys)."""
        return os.path.realpath(shutil.which(self.target.python) or self.target.python)

    def last_seconds(self, kind: str, full_only: bool = False) -> float | None:
        """The slowest earlier build of this package (``full_only``: that rebuilt every step)."""
        times = [
            e.meta.get("seconds")
            for e in cachedir.entries(self.target.opts.cache_dir, kinds=(kind,), sizes=False)
            if e.complete
            and e.meta.get("package") == self.target.package
            and (not full_only or e.meta.get("steps_rebuilt") == e.meta.get("steps_total"))
            and e.meta.get("seconds")
        ]
        return max(times) if times else None

    def side_costs(
        self, key_of: Callable, is_cached: Callable, product: str, same: str, fresh: Callable[[], str]
    ) -> list[tuple[str, str]]:
        """(label, cost) per side: cached, built by the other side (the same ``same``) or ``fresh()``."""
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
        """The build.json of ``key``'s build (plus 'reused'): from the cache (logged unless ``product`` is
        ""), else ``make(home, out, log_path)`` builds it into ``out`` (emptied) and returns that."""
        t = self.target
        builds = cachedir.kind_dir(kind, t.opts.cache_dir)
        home = builds / key
        with cachedir.locked(builds / f"{key}.lock"):
            cachedir.hold(home)
            meta = self.cached(kind, key, output)
            if meta:
                cachedir.touch(home)
                if product:
                    t.log(f"{label} {commit.sha[:10]}: {product} reused from the cache ({home})")
                return {**meta, "reused": True}
            home.mkdir(parents=True, exist_ok=True)
            out, log_path = home / output, home / "build.log"
            for stale in (out, log_path):
                cachedir.remove_tree(stale)
            out.mkdir()
            return {**make(home, out, log_path), "reused": False}
