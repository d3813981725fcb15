"""The installed package: where the workers' interpreter imports it from (asked in a subprocess: the
coordinator never imports it), which commit it was built from."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

from teperf.errors import TeperfError
from teperf.sides import changes, gitrepo
from teperf.sides.target import Pair, Refused, Target

COMPILED_FILE_SUFFIXES = (".so", ".pyd", ".dylib")

_FINDER = r"""
import importlib.metadata as md, importlib.util, json, site, sys, sysconfig
name = sys.argv[1]
out = dict(error=None, locations=None, origin=None, version=None, distribution=None)
try:
    spec = importlib.util.find_spec(name)
except Exception as exc:
    spec = None
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
if spec is not None:
    out["origin"] = spec.origin
    if spec.submodule_search_locations is not None:
        out["locations"] = list(spec.submodule_search_locations)
try:
    dists = list(md.packages_distributions().get(name, []))
except Exception:
    dists = []
for dist in dists + [name, name.replace("_", "-")]:
    try:
        out["version"] = md.version(dist)
        out["distribution"] = dist
        break
    except Exception:
        pass
dirs = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
try:
    dirs.update(site.getsitepackages())
    dirs.add(site.getusersitepackages())
except Exception:
    pass
out["site_dirs"] = sorted(dirs)
print(json.dumps(out))
"""


@dataclasses.dataclass(frozen=True)
class Installed:
    package: str
    location: Path  # the installed package directory
    version: str | None
    distribution: str | None
    in_site_dir: bool  # False for editable/in-place installs (a checkout on sys.path)
    sibling_libs: tuple[str, ...] = ()  # editable layout: shared objects next to the package dir


def ask_python(python: str, code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in ``python`` from an empty directory, where no package shadows the installed one."""
    with tempfile.TemporaryDirectory(prefix="teperf-ask-") as cwd:
        return subprocess.run(
            [python, "-c", code, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )


def find_installed(package: str, python: str = sys.executable) -> Installed:
    """Where ``python`` imports ``package`` from, found without importing it (a subprocess)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", package or ""):
        raise TeperfError(
            f"package {package!r} is not a top-level import name",
            "pass --package NAME, the top-level package under test (e.g. transformer_engine)",
        )
    exe = shutil.which(python) or python
    if not os.path.exists(exe):
        raise TeperfError(
            f"python interpreter {python} does not exist", "pass --python EXE, an existing interpreter"
        )
    proc = ask_python(exe, _FINDER, package)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TeperfError(
            f"cannot ask {python} where {package} is: {tail}", "check the interpreter (--python)"
        )
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    locations = info.get("locations")
    if not locations:
        why = info.get("error") or (
            "it is a single module, not a package" if info.get("origin") else "not found"
        )
        raise Refused(
            f"{package} is not installed in {python} ({why})",
            "install the package (one build) into that interpreter or put it on PYTHONPATH for --strategy "
            "overlay, or use --strategy build",
        )
    if len(locations) != 1:
        raise Refused(
            f"{package} is a namespace package spread over {len(locations)} directories "
            f"({', '.join(locations)})",
            "overlay needs one installed package directory; use --strategy build",
        )
    location = Path(locations[0]).absolute()
    site_dirs = {os.path.realpath(d) for d in info.get("site_dirs") or []}
    in_site = os.path.realpath(location.parent) in site_dirs
    # editable/in-place: compiled parts may sit next to the package directory
    beside = () if in_site else sorted(location.parent.iterdir())
    siblings = tuple(
        str(e)
        for e in beside
        if e.is_file() and e.name.startswith((package, f"lib{package}")) and is_compiled(e.name)
    )
    return Installed(package, location, info.get("version"), info.get("distribution"), in_site, siblings)


def version_commit(version: str | None) -> str | None:
    """'2.20.0.dev0+d0067d0' -> 'd0067d0' (also '+gabc1234', '+git.abc1234')."""
    if not version or "+" not in version:
        return None
    for part in re.split(r"[.\-_]", version.split("+", 1)[1]):
        m = re.fullmatch(r"g?([0-9a-f]{7,40})", part)
        if m:
            return m.group(1)
    return None


def installed_commit(repo: str | os.PathLike, installed: Installed) -> tuple[str | None, str]:
    """(full SHA of the commit the installed build came from, or None; how that was decided)."""
    version = installed.version
    short = version_commit(version)
    if short:
        sha = gitrepo.commit_sha(repo, short)
        if sha:
            return sha, f"verified: version {version} names commit {short}"
        return (
            None,
            f"unverified: version {version} names commit {short}, which is not in the repo (git fetch it)",
        )
    if version:
        for tag in (f"v{version}", version, f"release_v{version}"):
            sha = gitrepo.commit_sha(repo, f"refs/tags/{tag}")
            if sha:
                return sha, f"verified: version {version} matches tag {tag}"
        return None, f"unverified: version {version} names no commit or tag in the repo"
    return None, "unverified: the installed package has no version metadata"


def walk_files(top: Path) -> Iterable[str]:
    """Package-relative paths of the files under ``top`` (following directory symlinks), no __pycache__."""
    for root, dirs, files in os.walk(top, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel_root = os.path.relpath(root, top)
        for name in sorted(files):
            yield name if rel_root == "." else os.path.join(rel_root, name)


def fingerprint(location: Path, extra: Iterable[str] = ()) -> str:
    """Changes when the installed package changes (a new build, a reinstall)."""
    h = hashlib.sha256(str(location).encode())
    for rel in walk_files(location):
        with contextlib.suppress(OSError):
            st = os.stat(location / rel)
            h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    for path in extra:
        h.update(f"\0{path}".encode())
    return h.hexdigest()


def is_compiled(name: str) -> bool:
    return name.endswith(COMPILED_FILE_SUFFIXES) or ".so." in name


def compiled_files(installed: Installed) -> list[Path]:
    """The compiled files of the installed package (inside it, and beside it for an in-place build)."""
    found = [
        installed.location / rel
        for rel in walk_files(installed.location)
        if is_compiled(os.path.basename(rel))
    ]
    return found + [Path(p) for p in installed.sibling_libs]


@dataclasses.dataclass(frozen=True)
class Basis:
    """The installed build a pair's sides run over, checked against both sides."""

    installed: Installed
    commit: str | None  # the commit it was built from, when its version tells
    check: str  # how that was decided
    known_py: frozenset[str]  # package-relative .py paths tracked in base, head or that commit

    def to_meta(self) -> dict:
        i = self.installed
        return {
            "installed": str(i.location),
            "installed_version": i.version,
            "installed_distribution": i.distribution,
            "installed_layout": "site" if i.in_site_dir else "in-place",
            "installed_commit": self.commit,
            "installed_check": self.check,
        }


def basis(
    target: Target, pair: Pair, *, strategy: str, tier: str, installed: Installed | None = None
) -> Basis:
    """The installed package (unless given), checked to serve ``strategy`` (rebuilding up to ``tier``):
    Refused when a side's compiled sources differ from its build's commit beyond what that rebuilds."""
    installed = installed or find_installed(target.package, target.python)
    commit, check = installed_commit(target.repo, installed)
    for label, side in pair.sides() if commit else ():
        diff = changes.diff(target.repo, commit, side.sha, target.layout, target.package_dir)
        if changes.TIERS.index(diff.tier) > changes.TIERS.index(tier):
            raise Refused(
                f"{strategy} cannot run {label}: the installed {installed.package} {installed.version} was "
                f"built from {commit[:10]}, whose compiled sources differ from {label} {side.sha[:10]} "
                f"({changes.shorten(diff.deciding(), 4)})",
                f"install a build of {label} ({side.sha[:10]}) or of a commit with the same compiled "
                f"sources, or use --strategy {diff.tier}",
            )
    shas = filter(None, (pair.base.sha, pair.head.sha, commit))
    known = frozenset().union(*(gitrepo.tracked_py(target.repo, sha, target.package_dir) for sha in shas))
    return Basis(installed=installed, commit=commit, check=check, known_py=known)
