"""``--strategy auto``: ``path`` for a pure-Python package, else the cheapest strategy of the diff's tier
that can run here (a refused one's reason is kept and the next one up tried)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from teperf.sides import changes, gitrepo, strategies
from teperf.sides import installed as inst
from teperf.sides.strategy import Strategy
from teperf.sides.target import Pair, Plan, Refused, Target

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".pyx", ".f90", ".rs", ".go")
NATIVE_BUILD_FILES = frozenset({"CMakeLists.txt", "meson.build", "Cargo.toml", "build.rs"})
PACKAGING_FILES = ("setup.py", "pyproject.toml", "setup.cfg")
# what in a packaging file says it builds compiled code
NATIVE_PACKAGING = re.compile(
    r"ext_modules|Extension\(|cmake|scikit[-_]build|maturin|pybind11|cython|cffi_modules", re.IGNORECASE
)


def _tree_has_native_code(target: Target, sha: str) -> bool:
    for _mode, kind, _obj, path in gitrepo.ls_tree(target.repo, sha):
        p = PurePosixPath(path)
        if kind == "commit":
            return True
        top = p.parts[0] if len(p.parts) > 1 else ""
        if top in changes.NOT_BUILD_DIRS:
            continue
        if p.suffix in SOURCE_SUFFIXES or p.name in NATIVE_BUILD_FILES:
            return True
        if p.name in PACKAGING_FILES and NATIVE_PACKAGING.search(
            gitrepo.show_file(target.repo, sha, path) or ""
        ):
            return True
    return False


def pure_python(target: Target, pair: Pair) -> bool:
    """Nothing to build on either side, and nothing compiled in the installed copy (if there is one)."""
    if target.layout.core or target.layout.extension:
        return False
    if any(_tree_has_native_code(target, commit.sha) for _label, commit in pair.sides()):
        return False
    try:
        installed = inst.find_installed(target.package, target.python)
    except Refused:
        return True  # not installed (or a namespace package): the trees are all there is
    return not inst.compiled_files(installed)


def choose(target: Target, pair: Pair) -> tuple[Strategy, Plan, dict[str, str]]:
    """(the strategy, its plan, {strategy: why it was refused} for those tried first)."""
    # one module file (model.py) has no package directory to overlay or build: its tree on sys.path
    order = (
        ("path",)
        if target.module_file or pure_python(target, pair)
        else strategies.for_tier(pair.changes.tier, target.layout)
    )
    refused: dict[str, str] = {}
    for name, after in zip(order, order[1:]):
        strategy = strategies.get(name)(target, pair)
        try:
            return strategy, strategy.plan(), refused
        except Refused as exc:
            refused[name] = exc.one_line()
            target.log(f"{name} does not apply ({exc.problem}); trying {after}")
    strategy = strategies.get(order[-1])(target, pair)  # the last one's refusal is the error
    return strategy, strategy.plan(), refused
