"""build: build the whole package from each side's tree, once per hash of its compiled sources, in one
persistent build directory per repository and configuration (synced, so it recompiles only what differs).
The side is its ``.py`` files over ``prefix/<package>``, ``prefix`` after them on sys.path (dist metadata)."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from teperf.sides import Side, buildrun, cachedir, changes, gitrepo
from teperf.sides import installed as inst
from teperf.sides.gitrepo import Commit
from teperf.sides.layout import matches
from teperf.sides.shadow import ShadowSpec, shadow_side
from teperf.sides.strategies.compiled import CompiledStrategy, described, tree_key
from teperf.sides.target import Plan

# pip builds in the source directory, so its build directories persist
DEFAULT_COMMAND = tuple("{python} -m pip install --no-build-isolation --no-deps --target {prefix} .".split())
PLACEHOLDERS = {
    "{prefix}": "where the build installs to",
    "{src}": "the build directory (a copy of the tree)",
    "{python}": "the workers' interpreter",
    "{jobs}": "parallel jobs (--jobs)",
}


def compiled_hash(
    repo,
    sha: str,
    *,
    package_dir: str,
    skip=(),
    command=(),
    python: str = "",
    env: Mapping[str, str] | None = None,
    globs=None,
) -> tuple[str, int]:
    """(hash of the commit's compiled sources + how they are built, number of files hashed); ``skip``:
    patterns of build inputs that do not change what is built (version files, other frameworks)."""
    env = os.environ if env is None else env

    def selected(path: str, kind: str) -> bool:
        if globs:
            return any(fnmatch.fnmatchcase(path, g) for g in globs)
        is_input = changes.is_build_input(path, package_dir, submodule=(kind == "commit"))
        return is_input and not matches(path, skip)

    recipe = {
        "command": list(command),
        "python": os.path.realpath(shutil.which(python) or python) if python else "",
        "env": buildrun.hashed_env(env),
    }
    return tree_key(repo, sha, selected, recipe)


class Build(CompiledStrategy):
    name = "build"
    help = (
        "build everything from each side's tree in one persistent, incremental build directory (ccache if "
        "installed); cached per compiled sources"
    )
    tier = "build"
    cache_kind = "builds"

    @functools.cached_property
    def _env(self) -> dict[str, str]:
        return self.build_env()

    @property
    def template(self) -> list[str]:
        return list(self.target.opts.build_command or DEFAULT_COMMAND)

    @functools.cached_property
    def _globs(self) -> list[str]:
        return [g for g in os.environ.get("TEPERF_BUILD_GLOBS", "").split(",") if g]

    def key(self, commit: Commit) -> tuple[str, int]:
        t = self.target
        return compiled_hash(
            t.repo,
            commit.sha,
            package_dir=t.package_dir,
            skip=(*t.layout.version_files, *t.layout.unrelated),
            command=self.template,
            python=t.python,
            env=self._env,
            globs=self._globs,
        )

    def workdir(self) -> Path:
        config = {"command": self.template, "python": self.python_path, "env": buildrun.hashed_env(self._env)}
        return self.buildtree(config)

    def _estimate(self) -> str:
        """What a full build of this package took before (TE's figure only for TE: others may be fast)."""
        t = self.target
        last = self.last_seconds(self.cache_kind)
        if last:
            return f"about {last:.0f} s like the slowest {t.package} build before"
        if t.layout.name == "transformer_engine":
            return "TE's takes tens of minutes"
        return f"no earlier {t.package} build to go by"

    def plan(self) -> Plan:
        self.target.refuse_module(self.name)
        deciding = self.pair.changes.deciding() if self.pair.changes.tier == "build" else []
        reason = (
            f"compiled sources differ ({changes.shorten(deciding)})"
            if deciding
            else "forced: each side is built from its tree"
        )
        incremental = self.workdir() / "src"
        jobs = changes.plural(self._env["MAX_JOBS"], "job")
        costs = []
        for label, commit in self.pair.sides():
            digest, _ = self.key(commit)
            if self.cached(self.cache_kind, digest, "prefix"):
                cost = f"build reused from the cache ({digest[:12]})"
            elif incremental.is_dir():
                cost = f"incremental build in {incremental} (recompiles what differs, {jobs})"
            else:
                cost = f"full build (the first in this build directory; {self._estimate()}), {jobs}"
            costs.append((label, cost))
        return Plan(self.name, reason, tuple(costs))

    def ensure(self, label: str, commit: Commit, tree: Path) -> dict:
        """Build ``commit`` unless a build of its hash exists; return its build.json (plus 'reused')."""
        t = self.target
        digest, n_files = self.key(commit)

        def make(home: Path, prefix: Path, log_path: Path) -> dict:
            work = self.workdir()
            with cachedir.locked(work.with_suffix(".lock")):
                cachedir.hold(work)
                src = work / "src"
                rewritten = buildrun.sync_workdir(work, tree, commit.sha, repo=str(t.repo))
                subs = dict(prefix=str(prefix), src=str(src), python=t.python, jobs=self._env["MAX_JOBS"])
                argv = [re.sub(r"\{(\w+)\}", lambda m: subs.get(m[1], m[0]), arg) for arg in self.template]
                env = {**self._env, "TEPERF_BUILD_PREFIX": str(prefix), "TEPERF_BUILD_SRC": str(src)}
                t.log(
                    f"{label} {commit.sha[:10]}: building {t.package} in {src} "
                    f"({changes.plural(rewritten, 'file')} "
                    f"rewritten since its last build; compiled-sources hash {digest[:12]}, "
                    f"{changes.plural(env['MAX_JOBS'], 'job')}"
                    f"{', ccache' if 'CMAKE_CXX_COMPILER_LAUNCHER' in env else ''}); "
                    f"log: {log_path}"
                )
                meta = self.build_meta(
                    digest,
                    commit,
                    n_files,
                    hash=digest,
                    package_dir=t.package_dir,
                    command=argv,
                    prefix=str(prefix),
                    log=str(log_path),
                    workdir=str(src),
                    files_rewritten=rewritten,
                    globs=self._globs,
                    python=t.python,
                    env=buildrun.hashed_env(env, ("MAX_JOBS", "CMAKE_CXX_COMPILER_LAUNCHER")),
                )
                rc, seconds = buildrun.run_logged(
                    argv, cwd=src, env=env, log_path=log_path, what=f"building {label}", log=t.log
                )
            meta.update(seconds=round(seconds, 1), returncode=rc)
            self.settle(
                home,
                meta,
                produced=(prefix / t.package).is_dir(),
                missing=f"{prefix} has no {t.package}/ directory",
                building=f"building {t.package} for {label} {commit.sha[:10]}",
                product="package",
                fix="read the log, fix the build or pass another build command; the next run tries again",
            )
            t.log(f"{label} {commit.sha[:10]}: built in {meta['seconds']} s")
            return meta

        return self.ensure_built(self.cache_kind, digest, "prefix", label, commit, "", make)

    def prepare(self, label: str, commit: Commit, description: Mapping[str, Any]) -> Side:
        t = self.target
        tree = self.tree(commit, submodules=True)
        built = self.ensure(label, commit, tree)
        prefix = Path(built["prefix"])
        installed_dir = prefix / t.package
        known = gitrepo.tracked_py(t.repo, commit.sha, t.package_dir)
        if built.get("sha") and built["sha"] != commit.sha:
            with contextlib.suppress(gitrepo.GitFailed):  # the build's commit may be gone from this repo
                known |= gitrepo.tracked_py(t.repo, built["sha"], t.package_dir)
        spec = ShadowSpec(
            package=t.package,
            installed_dir=installed_dir,
            side_pkg_dir=t.side_pkg_dir(tree),
            key=f"{commit.sha[:16]}-{inst.fingerprint(installed_dir)[:12]}",
            known_py=frozenset(known),
        )
        description = {
            **description,
            "tree": str(tree),
            **described("build", built, "hash prefix log reused seconds from_sha command workdir"),
        }
        return shadow_side(label, spec, t, description, extra_sys_path=(str(prefix),))
