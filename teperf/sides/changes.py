"""What changed between two commits: each path one kind (python, version: no compiled code reads it,
extension and core as the layout says, build: any other build input, other), and the cheapest tier that
covers them all: overlay (python, version, other), extension (plus extension), build (plus the rest)."""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import PurePosixPath
from typing import Iterable

from teperf.sides import gitrepo
from teperf.sides.layout import PackageLayout, matches

PYTHON, VERSION, EXTENSION, CORE, BUILD, OTHER = "python", "version", "extension", "core", "build", "other"
KINDS = (PYTHON, VERSION, EXTENSION, CORE, BUILD, OTHER)
TIERS = ("overlay", "extension", "build")
# the kinds that put a diff in each tier (the overlay tier takes the rest)
DECIDING = {"build": (CORE, BUILD), "extension": (EXTENSION,), "overlay": (PYTHON, VERSION)}

# Suffixes of files that are documentation wherever they are.
DOC_SUFFIXES = (".md", ".rst", ".pyi")
# Outside the package, paths under these top-level directories are not build inputs.
NOT_BUILD_DIRS = frozenset(
    "docs doc tests test examples example benchmarks benchmark qa .github .gitlab .circleci .ci "
    "ci scripts notebooks results configs".split()
)
# Outside the package, these directories and file names are always build inputs.
BUILD_DIRS = frozenset("build_tools 3rdparty third_party thirdparty csrc cmake extern external".split())
BUILD_FILES = frozenset(
    "setup.py setup.cfg pyproject.toml CMakeLists.txt MANIFEST.in Makefile meson.build build.py".split()
)
# Data files (images, notebooks, tables, text): outside the package they feed no build. Inside it they
# stay build inputs, as an overlay runs the installed copy's data files, not the side's.
DATA_SUFFIXES = tuple(
    ".png .jpg .jpeg .gif .svg .webp .ico .bmp .pdf .ipynb .txt .csv .tsv .json .jsonl .yaml "
    ".yml .html .css .npy .npz .pkl .pt .bin .log".split()
)
COMPILED_SUFFIXES = tuple(
    ".c .cc .cpp .cxx .cu .cuh .h .hh .hpp .hxx .cmake .pyx .pxd .so .in .version .ld".split()
)


def inside(path: str, package_dir: str) -> bool:
    under = gitrepo.prefix(package_dir)
    return path.startswith(under) or path + "/" == under


def is_build_input(path: str, package_dir: str, submodule: bool = False) -> bool:
    """Would a change to ``path`` need a rebuild of the package? When unsure, yes (overlay then refuses)."""
    p = PurePosixPath(path)
    if submodule:
        return True
    if inside(path, package_dir):
        return p.name == "setup.py" if p.suffix == ".py" else p.suffix not in DOC_SUFFIXES
    top = p.parts[0] if len(p.parts) > 1 else ""
    if top in NOT_BUILD_DIRS:  # tests/cpp/*.cu and the like are not part of the package's build
        return False
    if p.name in BUILD_FILES or top in BUILD_DIRS or p.suffix in COMPILED_SUFFIXES:
        return True
    # docs, data, a script or another package outside the one under test
    if p.suffix in (*DOC_SUFFIXES, ".py") or p.suffix.lower() in DATA_SUFFIXES:
        return False
    return len(p.parts) > 1  # not a top-level LICENSE, .gitignore, VERSION.txt, ...


def classify(path: str, layout: PackageLayout, package_dir: str, submodule: bool = False) -> str:
    """The kind of one changed path (see the module docstring)."""
    if submodule:
        return CORE if layout.core else BUILD
    if matches(path, layout.version_files):
        return VERSION
    if matches(path, layout.unrelated):
        return OTHER
    if layout.extension and matches(path, layout.extension.sources):
        return EXTENSION
    p = PurePosixPath(path)
    if inside(path, package_dir) and p.suffix == ".py" and p.name != "setup.py":
        return PYTHON
    if not is_build_input(path, package_dir):
        return OTHER
    return CORE if matches(path, layout.core) else BUILD


@dataclasses.dataclass(frozen=True)
class Change:
    path: str
    kind: str


@dataclasses.dataclass(frozen=True)
class Changes:
    """The classified difference between two commits."""

    items: tuple[Change, ...]

    def paths(self, *kinds: str) -> list[str]:
        return [c.path for c in self.items if c.kind in kinds]

    @property
    def tier(self) -> str:
        kinds = {c.kind for c in self.items}
        return next((t for t in ("build", "extension") if kinds.intersection(DECIDING[t])), "overlay")

    def deciding(self) -> list[str]:
        """The paths that decide the tier (for the overlay tier: the .py and version files)."""
        return self.paths(*DECIDING[self.tier])

    def counts(self) -> dict[str, int]:
        return dict(collections.Counter(c.kind for c in self.items))


def diff(repo: str | os.PathLike, a: str, b: str, layout: PackageLayout, package_dir: str) -> Changes:
    entries = gitrepo.diff_entries(repo, a, b)
    return Changes(tuple(Change(e.path, classify(e.path, layout, package_dir, e.submodule)) for e in entries))


def shorten(paths: Iterable[str], shown: int = 3, sep: str = ", ") -> str:
    """'a, b, c +4 more'."""
    paths = list(paths)
    text = sep.join(paths[:shown])
    return text + (f" +{len(paths) - shown} more" if len(paths) > shown else "")


def plural(n: int | str, word: str) -> str:
    """'1 job', '16 jobs'."""
    return f"{n} {word}{'' if str(n) == '1' else 's'}"
