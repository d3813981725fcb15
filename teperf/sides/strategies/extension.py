"""extension: rebuild only the framework extension (the layout's; TE: ``transformer_engine_torch``) from
each side's tree, over the installed core library; one not loading against it names --strategy build."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping

from teperf.errors import TeperfError
from teperf.sides import Side, buildrun, cachedir, changes
from teperf.sides import installed as inst
from teperf.sides.gitrepo import Commit
from teperf.sides.layout import ExtensionBuild
from teperf.sides.strategies.compiled import CompiledStrategy, described
from teperf.sides.strategies.overlay import overlay_side, version_notes
from teperf.sides.target import Plan, Refused

KIND = "ext"


def ext_meta(built: Mapping[str, Any]) -> dict:
    """What a side's metadata says of its extension build."""
    return described("ext", built, "key prefix log reused seconds from_sha")


class Extension(CompiledStrategy):
    name = "extension"
    help = (
        "rebuild only the framework extension (TE: transformer_engine/pytorch) from each side's tree, "
        "over the installed core library; cached"
    )
    tier = "extension"
    cache_kind = "ext"
    te_seconds = 90.0
    # both sides' builds at once, the jobs split (_build_env): a build's serial steps (setup.py, the link)
    # leave most cores idle; one after the other, a cold TE pair took 113 + 57 s on 16 cores
    parallel = True

    @property
    def ext(self) -> ExtensionBuild:
        ext = self.target.layout.extension
        if ext is None:
            raise Refused(
                f"no extension build is known for {self.target.package} (layout {self.target.layout.name})",
                "describe it with --layout FILE (an [extension] table), or use --strategy build",
            )
        return ext

    @functools.cached_property
    def basis(self) -> inst.Basis:
        t, pair = self.target, self.pair
        self.ext  # noqa: B018 - refuses when the layout has no extension
        if pair.changes.tier == "build":
            raise Refused(
                f"the compiled core of {t.package} differs between base and head "
                f"({changes.shorten(pair.changes.deciding(), 4)}): rebuilding the extension alone is not "
                "enough",
                "use --strategy build",
            )
        installed = self.installed_build("the extension is built over the installed core")
        return inst.basis(t, pair, strategy="extension", tier="extension", installed=installed)

    @functools.cached_property
    def core(self) -> str:
        """Fingerprint of the installed core: every compiled file of the package but the extension's."""
        h = hashlib.sha256()
        for path in sorted(inst.compiled_files(self.basis.installed)):
            if not self.ext.is_artifact(path.name):
                with contextlib.suppress(OSError):
                    st = path.stat()
                    h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        return h.hexdigest()

    @functools.cached_property
    def _env(self) -> dict[str, str]:
        return self.build_env(extra=self.ext.env, ccache="masquerade")

    @functools.cached_property
    def _build_env(self) -> dict[str, str]:
        """The build's environment, MAX_JOBS (not in the key) split between the builds run at once."""
        env = dict(self._env)
        at_once = 1
        if self.parallel:
            keys = {self.key(commit)[0] for _label, commit in self.pair.sides()}
            at_once = max(1, sum(1 for key in keys if not self._cached(key)))
        n = str(max(1, int(env["MAX_JOBS"]) // at_once))
        env["MAX_JOBS"] = env["CMAKE_BUILD_PARALLEL_LEVEL"] = n
        return env

    def key(self, commit: Commit) -> tuple[str, int]:
        """(cache key of this commit's extension build, number of input files hashed)."""
        ext = self.ext
        recipe = {
            "command": ext.command("{python}", "{prefix}"),
            "setup_dir": ext.setup_dir,
            "python": self.python_path,
            "env": buildrun.hashed_env(self._env, tuple(ext.env)),
            "core": self.core,
        }
        return self.inputs_key(commit, (*ext.sources, *ext.hash_also), recipe)

    def _cached(self, key: str) -> dict:
        return self.cached(KIND, key, "prefix")

    def plan(self) -> Plan:
        self.target.refuse_module(self.name)
        installed = self.basis.installed
        paths = self.pair.changes.paths(changes.EXTENSION)
        reason = (
            f"the extension's sources differ ({changes.shorten(paths)}), the core's do not"
            if paths
            else "forced: the extension of each side is built from its tree"
        )
        last = self.last_seconds(KIND)
        estimate = (
            f"about {last:.0f} s like the slowest before"
            if last
            else "no earlier build to go by: TE's took 89-103 s on the H200's 16 cores"
            if self.target.layout.name == "transformer_engine"
            else f"no earlier {self.target.package} extension build to go by"
        )
        jobs = changes.plural(self._build_env["MAX_JOBS"], "job")
        over = f"over the installed {installed.package} {installed.version or ''}".rstrip()
        fresh = f"builds the extension from its tree with {jobs} ({estimate})"
        costs = [
            (label, f"{cost}, {over}")
            for label, cost in self.side_costs(self.key, self._cached, "extension", "inputs", lambda: fresh)
        ]
        return Plan(self.name, reason, tuple(costs), version_notes(self.target, self.pair))

    def ensure(self, label: str, commit: Commit) -> dict:
        """Build this commit's extension unless the cache has it; return its build.json (plus 'reused')."""
        key, n_files = self.key(commit)
        make = functools.partial(self._build, label, commit, key, n_files)
        return self.ensure_built(KIND, key, "prefix", label, commit, "extension", make)

    def _build(
        self, label: str, commit: Commit, key: str, n_files: int, home: Path, prefix: Path, log_path: Path
    ) -> dict:
        t, ext = self.target, self.ext
        src = home / "src"
        cachedir.remove_tree(src)
        buildrun.writable_copy(self.tree(commit), src)
        argv = ext.command(t.python, str(prefix))
        env = self._build_env
        t.log(
            f"{label} {commit.sha[:10]}: building the {t.layout.name} extension from its tree "
            f"({changes.plural(n_files, 'input file')}, {changes.plural(env['MAX_JOBS'], 'job')}); "
            f"log: {log_path}"
        )
        meta = self.build_meta(
            key,
            commit,
            n_files,
            command=argv,
            cwd=ext.setup_dir,
            prefix=str(prefix),
            log=str(log_path),
            core=self.core[:16],
            env=buildrun.hashed_env(env, tuple(ext.env) + ("MAX_JOBS",)),
        )
        before = buildrun.ccache_stats(env)
        started = time.time()  # the stamps show whether the sides' builds overlapped
        rc, seconds = buildrun.run_logged(
            argv,
            cwd=src / ext.setup_dir,
            env=env,
            log_path=log_path,
            what=f"building the extension for {label}",
            log=t.log,
        )
        pkg_root = prefix / t.package  # none there: no files (os.walk)
        artifacts = {
            rel: str(pkg_root / rel)
            for rel in (inst.walk_files(pkg_root) if rc == 0 else ())
            if ext.is_artifact(os.path.basename(rel))
        }
        meta.update(
            seconds=round(seconds, 1),
            started_at=round(started, 3),
            ended_at=round(time.time(), 3),
            returncode=rc,
            artifacts=artifacts,
            ccache=buildrun.ccache_delta(before, buildrun.ccache_stats(env)),
        )
        self.settle(
            home,
            meta,
            produced=bool(artifacts),
            missing=f"{prefix}/{t.package}/ has no {' or '.join(ext.artifacts)}",
            building=f"building the extension for {label} {commit.sha[:10]}",
            product="extension",
        )
        cachedir.remove_tree(src)
        t.log(f"{label} {commit.sha[:10]}: extension built in {meta['seconds']} s")
        return meta

    def prepare(self, label: str, commit: Commit, description: Mapping[str, Any]) -> Side:
        built = self.ensure(label, commit)
        return self.shadow(
            label,
            commit,
            self.tree(commit),
            description,
            own_files=built["artifacts"],
            replaced=self.ext.artifacts,
            key=f"-x{built['key'][:10]}",
            built=ext_meta(built),
        )

    def shadow(
        self, label: str, commit: Commit, tree: Path, description, *, key: str, built, **files
    ) -> Side:
        """overlay_side with the built ``files`` (own_files, replaced), refused if its built code fails."""
        built = {"changed_extension": self.pair.changes.paths(changes.EXTENSION), **built}
        side = overlay_side(self, label, commit, tree, description, key=key, built=built, **files)
        self.check_loads(label, Path(side.sys_path[0]))
        return side

    def check_loads(self, label: str, root: Path) -> None:
        """Import what loads the extension, once per shadow tree; an undefined symbol is one clear line."""
        meta_file = root / cachedir.META
        if cachedir.read_json(meta_file).get("extension_loads"):
            return
        code = "import importlib, sys; sys.path[0:0] = [sys.argv[1]]; importlib.import_module(sys.argv[2])"
        proc = inst.ask_python(self.target.python, code, str(root), self.ext.import_check, timeout=600)
        if proc.returncode == 0:
            cachedir.write_json(meta_file, {**cachedir.read_json(meta_file), "extension_loads": True})
            return
        err = proc.stderr.strip()
        symbol = re.search(r"undefined symbol: ?(\S+)", err)
        if symbol:
            raise TeperfError(
                f"the extension built from {label}'s tree does not load against the installed core library "
                f"(undefined symbol {symbol.group(1)}): {label} needs a core the installed build lacks",
                "use --strategy build (builds the core too)",
            )
        last = (err.splitlines() or ["(no output)"])[-1]
        raise TeperfError(
            f"with the extension built from {label}'s tree, import {self.ext.import_check} fails: {last}",
            "see the message; --strategy build builds everything from the tree",
        )
