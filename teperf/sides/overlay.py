"""Overlay: run each side's Python files on one installed build of the package.

The shadow tree of a side is ``<cache>/overlays/<key>/<package>/``: every
``.py`` file from the side's git tree (new ones included, deleted ones left
out), and every other file of the installed package (compiled libraries,
data files) as a symlink to the installed one. ``<cache>/overlays/<key>`` goes
first on the worker's sys.path. It holds no ``*.dist-info``/``*.egg-info``, so
``importlib.metadata`` still finds the installed distribution.

When it is valid: no build input differs between base, head and (when its
version names one, e.g. ``2.20.0.dev0+d0067d0``) the commit the installed
build came from. A build input is any non-``.py`` file of the package, a
``setup.py``, and outside the package anything but docs, tests, examples and
CI files (``is_build_input``). Decided from ``git diff``.

The coordinator never imports the package: it asks the interpreter that
will run the workers, in a subprocess, where the package is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

from teperf.errors import TeperfError
from teperf.sides import Side
from teperf.sides import cachedir


class OverlayRefused(TeperfError):
    """Overlay is not valid here; ``problem`` says why (auto then falls back to build)."""


# --------------------------------------------------------------------- what is a build input

# Suffixes of files that are documentation wherever they are.
DOC_SUFFIXES = (".md", ".rst", ".pyi")
# Outside the package, paths under these top-level directories are not build inputs.
NOT_BUILD_DIRS = frozenset(
    {"docs", "doc", "tests", "test", "examples", "example", "benchmarks", "benchmark", "qa", ".github",
     ".gitlab", ".circleci", ".ci", "ci", "scripts", "notebooks", "results", "configs"}
)
# Outside the package, these directories and file names are always build inputs.
BUILD_DIRS = frozenset({"build_tools", "3rdparty", "third_party", "thirdparty", "csrc", "cmake", "extern", "external"})
BUILD_FILES = frozenset(
    {"setup.py", "setup.cfg", "pyproject.toml", "CMakeLists.txt", "MANIFEST.in", "Makefile", "meson.build",
     "build.py"}
)
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".cmake", ".pyx",
                     ".pxd", ".so", ".in", ".version", ".ld")


def is_build_input(path: str, package_dir: str, submodule: bool = False) -> bool:
    """Would a change to ``path`` (repo-relative) need a rebuild of the package?

    Inside the package: everything but ``.py`` (except ``setup.py``) and docs.
    Outside: nothing under a docs/tests/examples/CI directory; otherwise
    submodules, build files and directories, compiled sources, and any other
    file below the top level (when unsure it counts: overlay then refuses,
    which is safe).
    """
    p = PurePosixPath(path)
    if submodule:
        return True
    pkg = package_dir.strip("/")
    inside = pkg in ("", ".") or path == pkg or path.startswith(pkg + "/")
    if inside:
        if p.suffix == ".py":
            return p.name == "setup.py"
        return p.suffix not in DOC_SUFFIXES
    top = p.parts[0] if len(p.parts) > 1 else ""
    if top in NOT_BUILD_DIRS:  # tests/cpp/*.cu and the like are not part of the package's build
        return False
    if p.name in BUILD_FILES or top in BUILD_DIRS or p.suffix in COMPILED_SUFFIXES:
        return True
    if p.suffix in DOC_SUFFIXES:
        return False
    if p.suffix == ".py":  # a script or another package outside the one under test
        return False
    if len(p.parts) == 1:  # top-level LICENSE, .gitignore, VERSION.txt, ...
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Change:
    path: str
    submodule: bool


def diff_entries(repo: str | os.PathLike, a: str, b: str) -> list[Change]:
    """Paths that differ between two commits (renames as delete + add), submodules marked."""
    from teperf.sides.git import run_git

    if a == b:
        return []
    raw = run_git(repo, "diff", "--raw", "-z", "--no-renames", "--no-ext-diff", "--no-abbrev", a, b, "--", binary=True)
    parts = [x.decode(errors="surrogateescape") for x in raw.split(b"\0")]
    changes = []
    i = 0
    while i < len(parts) - 1:
        meta, path = parts[i], parts[i + 1]
        i += 2
        if not meta.startswith(":"):
            continue
        old_mode, new_mode = meta[1:].split()[:2]
        changes.append(Change(path=path, submodule="160000" in (old_mode, new_mode)))
    return changes


def blockers(repo: str | os.PathLike, a: str, b: str, package_dir: str) -> list[str]:
    """The build inputs that differ between commits ``a`` and ``b``."""
    return [c.path for c in diff_entries(repo, a, b) if is_build_input(c.path, package_dir, c.submodule)]


# --------------------------------------------------------------------- the installed package

_FINDER = r"""
import importlib.metadata as md, importlib.util, json, site, sys, sysconfig
name = sys.argv[1]
out = {"python": sys.executable, "python_version": sys.version.split()[0], "error": None, "locations": None, "origin": None}
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
out["distributions"] = dists
out["version"] = out["distribution"] = None
for dist in dists + [name, name.replace("_", "-")]:
    try:
        out["version"] = md.version(dist)
        out["distribution"] = dist
        break
    except Exception:
        pass
dirs = set()
for key in ("purelib", "platlib"):
    dirs.add(sysconfig.get_paths()[key])
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
    python: str
    python_version: str
    in_site_dir: bool  # False for editable/in-place installs (a checkout on sys.path)
    sibling_libs: tuple[str, ...] = ()  # editable layout: shared objects next to the package dir

    def to_meta(self) -> dict:
        return {
            "installed": str(self.location),
            "installed_version": self.version,
            "installed_distribution": self.distribution,
            "installed_layout": "site" if self.in_site_dir else "in-place",
        }


def _check_package_name(package: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", package or ""):
        raise TeperfError(
            f"package {package!r} is not a top-level import name",
            "pass --package NAME, the top-level package under test (e.g. transformer_engine)",
        )


def find_installed(package: str, python: str = sys.executable, env: Mapping[str, str] | None = None) -> Installed:
    """Where ``python`` imports ``package`` from, found without importing it (a subprocess)."""
    _check_package_name(package)
    exe = shutil.which(python) or python
    if not os.path.exists(exe):
        raise TeperfError(f"python interpreter {python} does not exist", "pass --python EXE, an existing interpreter")
    # run from an empty directory, so a package in the current directory does not answer for the installed one
    with tempfile.TemporaryDirectory(prefix="teperf-find-") as cwd:
        proc = subprocess.run(
            [exe, "-c", _FINDER, package], cwd=cwd, capture_output=True, text=True,
            env=dict(os.environ if env is None else env), stdin=subprocess.DEVNULL, timeout=120,
        )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TeperfError(f"cannot ask {python} where {package} is: {tail}", "check the interpreter (--python)")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    locations = info.get("locations")
    if not locations:
        why = info.get("error") or ("it is a single module, not a package" if info.get("origin") else "not found")
        raise OverlayRefused(
            f"{package} is not installed in {python} ({why})",
            "install the package (one build) into that interpreter or put it on PYTHONPATH for --strategy overlay, "
            "or use --strategy build",
        )
    if len(locations) != 1:
        raise OverlayRefused(
            f"{package} is a namespace package spread over {len(locations)} directories ({', '.join(locations)})",
            "overlay needs one installed package directory; use --strategy build",
        )
    location = Path(locations[0]).absolute()
    site_dirs = {os.path.realpath(d) for d in info.get("site_dirs") or []}
    in_site = os.path.realpath(location.parent) in site_dirs
    siblings: list[str] = []
    if not in_site:  # editable/in-place: compiled parts may sit next to the package directory
        for entry in sorted(location.parent.iterdir()):
            name = entry.name
            if entry.is_file() and name.startswith((package, f"lib{package}")) and (
                name.endswith((".so", ".pyd", ".dylib")) or ".so." in name
            ):
                siblings.append(str(entry))
    return Installed(
        package=package,
        location=location,
        version=info.get("version"),
        distribution=info.get("distribution"),
        python=info.get("python") or exe,
        python_version=info.get("python_version") or "",
        in_site_dir=in_site,
        sibling_libs=tuple(siblings),
    )


def version_commit(version: str | None) -> str | None:
    """The commit in a local version label: '2.20.0.dev0+d0067d0' -> 'd0067d0' (also '+gabc1234', '+git.abc1234')."""
    if not version or "+" not in version:
        return None
    local = version.split("+", 1)[1]
    for part in re.split(r"[.\-_]", local):
        m = re.fullmatch(r"g?([0-9a-f]{7,40})", part)
        if m:
            return m.group(1)
    return None


def installed_commit(repo: str | os.PathLike, installed: Installed) -> tuple[str | None, str]:
    """(full SHA of the commit the installed build came from, or None; how that was decided)."""
    from teperf.sides.git import run_git

    def lookup(ref: str) -> str | None:
        out = run_git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).strip()
        return out or None

    version = installed.version
    short = version_commit(version)
    if short:
        sha = lookup(short)
        if sha:
            return sha, f"verified: version {version} names commit {short}"
        return None, f"unverified: version {version} names commit {short}, which is not in the repo (git fetch it)"
    if version:
        for tag in (f"v{version}", version, f"release_v{version}"):
            sha = lookup(f"refs/tags/{tag}")
            if sha:
                return sha, f"verified: version {version} matches tag {tag}"
        return None, f"unverified: version {version} names no commit or tag in the repo"
    return None, "unverified: the installed package has no version metadata"


# --------------------------------------------------------------------- the decision


@dataclasses.dataclass(frozen=True)
class OverlayPlan:
    repo: Path
    base_sha: str
    head_sha: str
    package: str
    package_dir: str
    installed: Installed
    installed_commit: str | None
    installed_check: str
    known_py: frozenset[str]  # package-relative .py paths tracked in base, head or the installed commit
    changed_py: tuple[str, ...]  # repo-relative .py paths that differ between base and head


def tracked_py(repo: str | os.PathLike, sha: str, package_dir: str) -> set[str]:
    from teperf.sides.git import ls_tree

    pkg = package_dir.strip("/")
    prefix = "" if pkg in ("", ".") else pkg + "/"
    rows = ls_tree(repo, sha, prefix or None)
    return {name[len(prefix):] for _m, kind, _o, name in rows if kind == "blob" and name.endswith(".py")}


def _describe_blockers(paths: list[str]) -> str:
    shown = ", ".join(paths[:4])
    return shown + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")


def plan_overlay(
    repo: str | os.PathLike,
    base_sha: str,
    head_sha: str,
    *,
    package: str,
    package_dir: str,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> OverlayPlan:
    """Decide whether overlay is valid for base..head; OverlayRefused (with the reason) if not."""
    repo = Path(repo)
    short = {base_sha: "base", head_sha: "head"}
    found = blockers(repo, base_sha, head_sha, package_dir)
    if found:
        raise OverlayRefused(
            f"overlay cannot run base..head: build inputs of {package} differ between base "
            f"{base_sha[:10]} and head {head_sha[:10]} ({_describe_blockers(found)})",
            "use --strategy build (builds each side from source, cached), or --strategy env with two installs",
        )
    installed = find_installed(package, python, env)
    commit, check = installed_commit(repo, installed)
    if commit:
        for sha in sorted({base_sha, head_sha}):
            found = blockers(repo, commit, sha, package_dir)
            if found:
                raise OverlayRefused(
                    f"overlay cannot run {short[sha]}: the installed {package} {installed.version} was built from "
                    f"{commit[:10]}, whose build inputs differ from {short[sha]} {sha[:10]} ({_describe_blockers(found)})",
                    f"install a build of {short[sha]} ({sha[:10]}) or of a commit with the same compiled sources, "
                    "or use --strategy build",
                )
    known = tracked_py(repo, base_sha, package_dir) | tracked_py(repo, head_sha, package_dir)
    if commit:
        known |= tracked_py(repo, commit, package_dir)
    changed = tuple(c.path for c in diff_entries(repo, base_sha, head_sha) if c.path.endswith(".py"))
    return OverlayPlan(
        repo=repo, base_sha=base_sha, head_sha=head_sha, package=package, package_dir=package_dir,
        installed=installed, installed_commit=commit, installed_check=check, known_py=frozenset(known),
        changed_py=changed,
    )


# --------------------------------------------------------------------- the shadow tree


def _walk_files(top: Path) -> Iterable[str]:
    """Package-relative paths of the files under ``top`` (following directory symlinks), no __pycache__."""
    for root, dirs, files in os.walk(top, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel_root = os.path.relpath(root, top)
        for name in sorted(files):
            yield name if rel_root == "." else os.path.join(rel_root, name)


def fingerprint(location: Path, extra: Iterable[str] = ()) -> str:
    """Changes when the installed package changes (a new build, a reinstall)."""
    h = hashlib.sha256(str(location).encode())
    for rel in _walk_files(location):
        try:
            st = os.stat(location / rel)
        except OSError:
            continue
        h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    for path in extra:
        h.update(f"\0{path}".encode())
    return h.hexdigest()


def build_shadow(
    installed_dir: Path,
    side_pkg_dir: Path,
    *,
    package: str,
    key: str,
    known_py: Iterable[str] = (),
    sibling_libs: Iterable[str] = (),
    cache_dir: str | os.PathLike | None = None,
    meta: Mapping | None = None,
) -> tuple[Path, dict]:
    """Make (or reuse) ``<cache>/overlays/<key>/<package>/``; return (root for sys.path, stats)."""
    overlays = cachedir.kind_dir("overlays", cache_dir)
    final = overlays / key
    meta_file = final / cachedir.META
    with cachedir.locked(overlays / f"{key}.lock"):
        existing = cachedir.read_json(meta_file)
        if existing.get("complete"):
            cachedir.touch(final)
            return final, existing.get("stats", {})
        if final.exists():
            cachedir.remove_tree(final)
        tmp = cachedir.tmp_sibling(final)
        try:
            stats = _fill_shadow(tmp, installed_dir, side_pkg_dir, package, set(known_py), sibling_libs)
            cachedir.write_json(tmp / cachedir.META, {**dict(meta or {}), "complete": True, "stats": stats})
            cachedir.publish(tmp, final)
        except BaseException:
            cachedir.remove_tree(tmp)
            raise
    return final, stats


def _fill_shadow(root: Path, installed_dir: Path, side_pkg_dir: Path, package: str, known_py: set, siblings) -> dict:
    shadow = root / package
    shadow.mkdir()
    side_py = set(rel for rel in _walk_files(side_pkg_dir) if rel.endswith(".py")) if side_pkg_dir.is_dir() else set()
    stats = {"py_from_side": 0, "links": 0, "deleted_py": [], "kept_installed_py": [], "sibling_libs": []}
    for rel in _walk_files(installed_dir):
        if rel.endswith(".py"):
            if rel in side_py:
                continue  # the side's own copy comes below
            if rel in known_py:
                stats["deleted_py"].append(rel)  # tracked in git, absent on this side: deleted
                continue
            stats["kept_installed_py"].append(rel)  # generated at install time (not in git): keep
        target = shadow / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.abspath(installed_dir / rel), target)
        stats["links"] += 1
    for rel in sorted(side_py):
        target = shadow / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(side_pkg_dir / rel, target)
        os.chmod(target, 0o644)
        stats["py_from_side"] += 1
    for lib in siblings:  # in-place builds keep the compiled parts next to the package directory
        os.symlink(os.path.abspath(lib), root / os.path.basename(lib))
        stats["sibling_libs"].append(os.path.basename(lib))
    return stats


def check_import_location(root: Path, package: str, python: str, env: Mapping[str, str] | None = None) -> str:
    """Ask ``python`` (with ``root`` first on sys.path, as the worker does) where ``package`` comes from."""
    code = (
        "import importlib.util, sys; sys.path[0:0] = [sys.argv[1]]; "
        "s = importlib.util.find_spec(sys.argv[2]); print(s.origin if s else '')"
    )
    with tempfile.TemporaryDirectory(prefix="teperf-check-") as cwd:
        proc = subprocess.run(
            [python, "-c", code, str(root), package], cwd=cwd, capture_output=True, text=True,
            env=dict(os.environ if env is None else env), stdin=subprocess.DEVNULL, timeout=120,
        )
    origin = proc.stdout.strip()
    if proc.returncode != 0 or not origin or not os.path.abspath(origin).startswith(str(root) + os.sep):
        raise TeperfError(
            f"with the overlay {root} first on sys.path, {python} still imports {package} from "
            f"{origin or '(nowhere)'}",
            "remove whatever shadows it (an import hook or .pth that loads it first), or use --strategy build",
        )
    return origin


def make_side(
    label: str,
    *,
    installed_dir: Path,
    side_pkg_dir: Path,
    package: str,
    key: str,
    python: str,
    known_py: Iterable[str] = (),
    sibling_libs: Iterable[str] = (),
    extra_sys_path: Iterable[str] = (),
    cache_dir: str | os.PathLike | None = None,
    description: Mapping | None = None,
    check: bool = True,
) -> Side:
    description = dict(description or {})
    root, stats = build_shadow(
        installed_dir, side_pkg_dir, package=package, key=key, known_py=known_py, sibling_libs=sibling_libs,
        cache_dir=cache_dir, meta={k: description.get(k) for k in ("sha", "repo", "subject", "package")},
    )
    if check:
        check_import_location(root, package, python)
    description.update(
        overlay=str(root),
        overlay_py_files=stats.get("py_from_side"),
        overlay_links=stats.get("links"),
        overlay_deleted_py=stats.get("deleted_py"),
        overlay_kept_installed_py=stats.get("kept_installed_py"),
    )
    return Side(label=label, python=python, sys_path=(str(root), *extra_sys_path), env={}, description=description)


def overlay_side(
    label: str,
    plan: OverlayPlan,
    tree: Path,
    sha: str,
    *,
    python: str,
    cache_dir: str | os.PathLike | None = None,
    description: Mapping | None = None,
) -> Side:
    """The side for commit ``sha`` (its files in ``tree``): its .py files on the installed package."""
    installed = plan.installed
    pkg = plan.package_dir.strip("/")
    side_pkg_dir = tree if pkg in ("", ".") else tree / pkg
    key = f"{sha[:16]}-{fingerprint(installed.location, installed.sibling_libs)[:12]}"
    description = {
        **dict(description or {}),
        **installed.to_meta(),
        "installed_commit": plan.installed_commit,
        "installed_check": plan.installed_check,
        "changed_py": list(plan.changed_py),
    }
    return make_side(
        label, installed_dir=installed.location, side_pkg_dir=side_pkg_dir, package=plan.package, key=key,
        python=python, known_py=plan.known_py, sibling_libs=installed.sibling_libs, cache_dir=cache_dir,
        description=description,
    )
