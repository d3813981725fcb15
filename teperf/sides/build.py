"""Build strategy: build the package from a side's tree, once per hash of its compiled sources.

The hash covers the build inputs of the tree (``teperf.sides.overlay.is_build_input``:
non-``.py`` files of the package, ``setup.py``, build directories,
submodules, ...; or the files matching ``TEPERF_BUILD_GLOBS`` / ``globs``),
the build command, the interpreter and the build-relevant environment. Two
commits that differ only in Python therefore share one build. A build lives
in ``<cache>/builds/<hash>/``: ``prefix/`` (what the command installed),
``build.log`` and ``build.json``. Only successful builds are reused.

The side then runs as an overlay on the build: its own ``.py`` files over
``prefix/<package>`` (the build may come from another commit with the same
compiled sources), with ``prefix`` on sys.path after the overlay so the
build's distribution metadata is found.

Build command: an argv list; ``{prefix}``, ``{src}`` and ``{python}`` in it
are replaced. It runs in a scratch copy of the tree (``builds/<hash>/src``,
removed after a successful build), with ``TEPERF_BUILD_PREFIX`` and
``TEPERF_BUILD_SRC`` set. Default:
``{python} -m pip install --no-build-isolation --no-deps --target {prefix} .``,
and for transformer_engine also ``NVTE_FRAMEWORK=pytorch`` and
``NVTE_CUDA_ARCHS`` (the local GPU's, from nvidia-smi, unless set).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

from teperf.errors import TeperfError
from teperf.sides import Side
from teperf.sides import cachedir

DEFAULT_COMMAND = ("{python}", "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--target", "{prefix}", ".")
# environment variables that change what a build produces (part of the hash)
HASHED_ENV = ("NVTE_FRAMEWORK", "NVTE_CUDA_ARCHS", "NVTE_BUILD_DEBUG", "NVTE_UB_WITH_MPI", "NVTE_ENABLE_NVSHMEM",
              "NVTE_WITH_CUBLASMP", "CUDA_HOME", "CUDA_PATH", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS")
LOG_TAIL_LINES = 40

Log = Callable[[str], None]


class BuildFailed(TeperfError):
    def __init__(self, problem: str, fix: str, log_path: Path, tail: str):
        super().__init__(problem, fix)
        self.log_path = log_path
        self.tail = tail


def _stderr_log(message: str) -> None:
    print(f"teperf: {message}", file=sys.stderr, flush=True)


def cuda_archs() -> str | None:
    """'90' for an H200, '80;90' for a mixed host; None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    archs = sorted({line.strip().replace(".", "") for line in out.splitlines() if line.strip()})
    return ";".join(archs) or None


def build_env(package: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if package == "transformer_engine":
        env.setdefault("NVTE_FRAMEWORK", "pytorch")
        if not env.get("NVTE_CUDA_ARCHS"):
            archs = cuda_archs()
            if archs:
                env["NVTE_CUDA_ARCHS"] = archs
        env.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    return env


def default_command(package: str) -> list[str]:
    return list(DEFAULT_COMMAND)


def _selected(rows, package_dir: str, globs: Iterable[str] | None):
    from teperf.sides.overlay import is_build_input

    globs = list(globs or [])
    for mode, kind, obj, path in rows:
        if globs:
            if any(fnmatch.fnmatchcase(path, g) for g in globs):
                yield mode, obj, path
        elif is_build_input(path, package_dir, submodule=(kind == "commit")):
            yield mode, obj, path


def compiled_hash(
    repo: str | os.PathLike,
    sha: str,
    *,
    package_dir: str,
    command: Iterable[str] = (),
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    globs: Iterable[str] | None = None,
) -> tuple[str, int]:
    """(hash of the commit's compiled sources + how they are built, number of files hashed)."""
    from teperf.sides.git import ls_tree

    env = os.environ if env is None else env
    h = hashlib.sha256()
    n = 0
    for mode, obj, path in _selected(ls_tree(repo, sha), package_dir, globs):
        h.update(f"{mode} {obj} {path}\0".encode(errors="surrogateescape"))
        n += 1
    recipe = {
        "command": list(command),
        "python": os.path.realpath(shutil.which(python) or python),
        "env": {k: env.get(k) for k in HASHED_ENV if env.get(k)},
    }
    h.update(json.dumps(recipe, sort_keys=True).encode())
    return h.hexdigest()[:20], n


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def ensure_build(
    repo: str | os.PathLike,
    sha: str,
    tree: Path,
    *,
    package: str,
    package_dir: str,
    python: str = sys.executable,
    cache_dir: str | os.PathLike | None = None,
    build_command: list[str] | None = None,
    globs: Iterable[str] | None = None,
    env: Mapping[str, str] | None = None,
    label: str = "",
    log: Log | None = None,
) -> dict:
    """Build ``tree`` (commit ``sha``) unless a build with the same hash exists; return build.json's content.

    Keys: hash, prefix, log, sha (the commit it was built from), command, seconds,
    ok, reused (True when this call did not build).
    """
    log = log or _stderr_log
    env = build_env(package, env)
    template = list(build_command or default_command(package))
    globs = list(globs) if globs is not None else [g for g in os.environ.get("TEPERF_BUILD_GLOBS", "").split(",") if g]
    digest, n_files = compiled_hash(repo, sha, package_dir=package_dir, command=template, python=python, env=env,
                                    globs=globs or None)
    builds = cachedir.kind_dir("builds", cache_dir)
    home = builds / digest
    meta_file = home / cachedir.BUILD_META
    with cachedir.locked(builds / f"{digest}.lock"):
        meta = cachedir.read_json(meta_file)
        if meta.get("ok") and (home / "prefix").is_dir():
            cachedir.touch(home)
            return {**meta, "reused": True}
        home.mkdir(parents=True, exist_ok=True)
        prefix, src, log_path = home / "prefix", home / "src", home / "build.log"
        for stale in (prefix, src):
            cachedir.remove_tree(stale)
        prefix.mkdir()
        shutil.copytree(tree, src, symlinks=True)
        for root, dirs, files in os.walk(src):  # git archive keeps modes; the build needs to write
            for name in dirs + files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o200)
        subs = {"{prefix}": str(prefix), "{src}": str(src), "{python}": python}
        argv = []
        for arg in template:
            for key, value in subs.items():
                arg = arg.replace(key, value)
            argv.append(arg)
        run_env = {**env, "TEPERF_BUILD_PREFIX": str(prefix), "TEPERF_BUILD_SRC": str(src)}
        run_env.pop("NVTE_PROJECT_BUILDING", None)  # the build sets it itself
        who = f"{label} " if label else ""
        log(f"building {package} for {who}{sha[:10]} (compiled-sources hash {digest[:12]}, {n_files} files); "
            f"log: {log_path}")
        meta = {
            "ok": False, "hash": digest, "sha": sha, "repo": str(repo), "package": package,
            "package_dir": package_dir, "command": argv, "prefix": str(prefix), "log": str(log_path),
            "hashed_files": n_files, "globs": globs, "python": python,
            "env": {k: run_env.get(k) for k in HASHED_ENV + ("MAX_JOBS",) if run_env.get(k)},
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        started = time.perf_counter()
        with open(log_path, "wb") as out:
            out.write(f"$ {' '.join(argv)}\n(cwd {src})\n".encode())
            out.flush()
            try:
                proc = subprocess.run(argv, cwd=src, env=run_env, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
                rc = proc.returncode
            except OSError as exc:
                out.write(f"\ncould not start the build command: {exc}\n".encode())
                rc = 127
        meta.update(seconds=round(time.perf_counter() - started, 1), returncode=rc)
        if rc == 0 and not (prefix / package).is_dir():
            with open(log_path, "a") as out:
                out.write(f"\nteperf: the build exited 0 but {prefix} has no {package}/ directory\n")
            rc = meta["returncode"] = -1
        if rc != 0:
            cachedir.write_json(meta_file, meta)
            tail = _tail(log_path)
            log(f"build failed; last lines of {log_path}:\n{tail}")
            what = "produced no package" if rc == -1 else f"failed with exit {rc}"
            raise BuildFailed(
                f"building {package} for {who}{sha[:10]} {what} (log: {log_path})",
                "read the log, fix the build or pass another build command; the next run tries again",
                log_path, tail,
            )
        meta["ok"] = True
        cachedir.write_json(meta_file, meta)
        cachedir.remove_tree(src)
        log(f"built {package} for {who}{sha[:10]} in {meta['seconds']}s")
        return {**meta, "reused": False}


def build_side(
    label: str,
    repo: str | os.PathLike,
    sha: str,
    tree: Path,
    *,
    package: str,
    package_dir: str,
    python: str = sys.executable,
    cache_dir: str | os.PathLike | None = None,
    build_command: list[str] | None = None,
    globs: Iterable[str] | None = None,
    description: Mapping | None = None,
    log: Log | None = None,
) -> Side:
    """The side for commit ``sha``: a (cached) build of its compiled sources, with its own .py on top."""
    from teperf.sides import overlay

    built = ensure_build(repo, sha, tree, package=package, package_dir=package_dir, python=python,
                         cache_dir=cache_dir, build_command=build_command, globs=globs, label=label, log=log)
    prefix = Path(built["prefix"])
    installed_dir = prefix / package
    known = overlay.tracked_py(repo, sha, package_dir)
    if built.get("sha") and built["sha"] != sha:
        try:
            known |= overlay.tracked_py(repo, built["sha"], package_dir)
        except Exception:  # the commit the build came from is gone from this repo
            pass
    pkg = package_dir.strip("/")
    side_pkg_dir = tree if pkg in ("", ".") else tree / pkg
    key = f"{sha[:16]}-{overlay.fingerprint(installed_dir)[:12]}"
    description = {
        **dict(description or {}),
        "build_hash": built["hash"],
        "build_prefix": str(prefix),
        "build_log": built["log"],
        "build_reused": built["reused"],
        "build_seconds": built.get("seconds"),
        "build_from_sha": built.get("sha"),
        "build_command": built.get("command"),
    }
    return overlay.make_side(
        label, installed_dir=installed_dir, side_pkg_dir=side_pkg_dir, package=package, key=key, python=python,
        known_py=known, extra_sys_path=(str(prefix),), cache_dir=cache_dir, description=description,
    )
