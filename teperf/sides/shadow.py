"""Shadow trees: ``<cache>/overlays/<key>/<package>/`` holds one side's ``.py`` files and a symlink to the
build's copy of every other file the side does not bring. Its parent goes first on sys.path; it holds no
``*.dist-info``, so ``importlib.metadata`` still finds the installed distribution."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Iterable, Mapping

from teperf.errors import TeperfError
from teperf.sides import Side, cachedir
from teperf.sides.installed import ask_python, walk_files
from teperf.sides.layout import matches_name
from teperf.sides.target import Target


@dataclasses.dataclass(frozen=True)
class ShadowSpec:
    package: str
    installed_dir: Path  # the build's package directory (installed, or a build prefix's)
    side_pkg_dir: Path  # the side's package directory in its materialized tree
    key: str  # cache key: changes whenever any of the inputs does
    known_py: frozenset[str] = frozenset()  # package-relative .py files tracked in git (absent = deleted)
    sibling_libs: tuple[str, ...] = ()  # in-place builds: compiled files next to the package directory
    own_files: Mapping[str, str] = dataclasses.field(default_factory=dict)  # package-relative -> side's file
    replaced: tuple[str, ...] = ()  # fnmatch patterns of build files (base names) the side's files replace


def _link(target: Path, source: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.abspath(source), target)


def _fill_shadow(root: Path, spec: ShadowSpec) -> dict:
    shadow = root / spec.package
    shadow.mkdir()
    side_dir = spec.side_pkg_dir
    side_py = {rel for rel in walk_files(side_dir) if rel.endswith(".py")}
    stats = {
        "py_from_side": len(side_py),
        "links": 0,
        "deleted_py": [],
        "kept_installed_py": [],
        "sibling_libs": [],
        "own_files": sorted(spec.own_files),
        "replaced": [],
    }
    for rel in walk_files(spec.installed_dir):
        if rel.endswith(".py"):
            if rel in side_py:
                continue  # the side's own copy comes below
            if rel in spec.known_py:
                stats["deleted_py"].append(rel)  # tracked in git, absent on this side: deleted
                continue
            stats["kept_installed_py"].append(rel)  # generated at install time (not in git): keep
        elif rel in spec.own_files or matches_name(os.path.basename(rel), spec.replaced):
            stats["replaced"].append(rel)  # the side brings its own (two copies would both be found)
            continue
        _link(shadow / rel, spec.installed_dir / rel)
        stats["links"] += 1
    for rel in sorted(side_py):
        target = shadow / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(side_dir / rel, target)
        os.chmod(target, 0o644)
    for rel, source in sorted(spec.own_files.items()):
        _link(shadow / rel, Path(source))
    for lib in spec.sibling_libs:  # in-place builds keep the compiled parts next to the package directory
        name = os.path.basename(lib)
        if matches_name(name, spec.replaced):
            stats["replaced"].append(name)
            continue
        os.symlink(os.path.abspath(lib), root / name)
        stats["sibling_libs"].append(name)
    return stats


def shadow_side(
    label: str, spec: ShadowSpec, target: Target, description: Mapping, extra_sys_path: Iterable[str] = ()
) -> Side:
    """The side that runs ``spec``'s shadow tree ``<cache>/overlays/<key>/<package>/`` (made once), checked
    to be what ``target.python`` imports with it first on sys.path, as the worker has it."""
    description, python = dict(description), target.python
    overlays = cachedir.kind_dir("overlays", target.opts.cache_dir)
    root = overlays / spec.key
    with cachedir.locked(overlays / f"{spec.key}.lock"):
        cachedir.hold(root)
        meta = cachedir.read_json(root / cachedir.META)
        if meta.get("complete"):
            cachedir.touch(root)
        else:
            cachedir.remove_tree(root)
            with cachedir.making(root) as tmp:
                meta = {k: description.get(k) for k in ("sha", "repo", "subject", "package")}
                meta.update(complete=True, stats=_fill_shadow(tmp, spec))
                cachedir.write_json(tmp / cachedir.META, meta)
    code = (
        "import importlib.util, sys; sys.path[0:0] = [sys.argv[1]]; "
        "s = importlib.util.find_spec(sys.argv[2]); print(s.origin if s else '')"
    )
    proc = ask_python(python, code, str(root), spec.package)
    origin = proc.stdout.strip()
    if proc.returncode != 0 or not origin or not os.path.abspath(origin).startswith(str(root) + os.sep):
        raise TeperfError(
            f"with the overlay {root} first on sys.path, {python} still imports {spec.package} from "
            f"{origin or '(nowhere)'}",
            "remove whatever shadows it (an import hook or .pth that loads it first), "
            "or use --strategy build",
        )
    stats = meta.get("stats", {})
    description.update(
        overlay=str(root),
        overlay_py_files=stats.get("py_from_side"),
        overlay_links=stats.get("links"),
        overlay_deleted_py=stats.get("deleted_py"),
        overlay_kept_installed_py=stats.get("kept_installed_py"),
    )
    if stats.get("own_files"):
        description.update(overlay_own_files=stats["own_files"], overlay_replaced=stats.get("replaced"))
    return Side(label=label, python=python, sys_path=(str(root), *extra_sys_path), description=description)
