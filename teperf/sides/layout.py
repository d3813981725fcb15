"""What teperf knows about a package's source layout: which paths are what, and how its extension is built.

All of teperf's TransformerEngine-specific build knowledge is ``TE_LAYOUT`` below. Any other package gets
``GENERIC`` (no core/extension split: a non-Python change means a full build) unless ``--layout FILE``::

    core = ["mypkg/core/"]                 # compiled core library sources: a change needs --strategy build
    version_files = ["VERSION.txt"]        # version strings only: a change is a note, not a build
    unrelated = ["mypkg/jax/"]             # build inputs that do not reach what is measured
    build_env = { MYPKG_FRAMEWORK = "torch" }

    [extension]                            # a framework extension built on its own, over the installed core
    sources = ["mypkg/ext/"]               # its inputs: a change needs only it rebuilt
    setup_dir = "mypkg/ext"                # where its setup.py is
    artifacts = ["mypkg_ext*"]             # file names of the built extension in the installed package
    import_check = "mypkg"                 # importing this loads the extension
    env = { MYPKG_FORCE_BUILD = "1" }
    hash_also = ["mypkg/core/include/"]    # further inputs of its build (hashed into the cache key)

    [core_build]                           # the core library built on its own with CMake (--strategy core)
    cmake_dir = "mypkg/core"               # where its CMakeLists.txt is
    artifacts = ["libmypkg_core.so"]       # the built library's file names (they replace the installed ones)
    sources = ["third_party/"]             # inputs besides `core` (hashed into the cache key)
    cmake_args = ["-DCMAKE_BUILD_TYPE=Release"]
    module_dirs = { MYPKG_DEP_PATH = "nvidia.dep" }   # unset variables: that module's directory

A pattern ending in ``/`` is a directory (everything below it), any other an ``fnmatch`` pattern on the
repository-relative path.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import tomllib
from typing import Iterable, Mapping

from teperf.errors import TeperfError


def matches(path: str, patterns: Iterable[str]) -> bool:
    return any(
        path.startswith(p) or path == p[:-1] if p.endswith("/") else fnmatch.fnmatchcase(path, p)
        for p in patterns
    )


def matches_name(name: str, patterns: Iterable[str]) -> bool:
    """Whether a file's base name matches one of the ``fnmatch`` patterns."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


@dataclasses.dataclass(frozen=True)
class ExtensionBuild:
    """A framework extension that builds on its own from ``setup_dir`` against the installed core."""

    sources: tuple[str, ...]
    setup_dir: str
    artifacts: tuple[str, ...]
    import_check: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    hash_also: tuple[str, ...] = ()

    def command(self, python: str, prefix: str) -> list[str]:
        pip = "-m pip install --no-build-isolation --no-deps --no-index --target".split()
        return [python, *pip, prefix, "."]

    def is_artifact(self, name: str) -> bool:
        return matches_name(name, self.artifacts)


@dataclasses.dataclass(frozen=True)
class CoreBuild:
    """A compiled core library that CMake builds from ``cmake_dir`` on its own (one Ninja tree per repo)."""

    cmake_dir: str
    artifacts: tuple[str, ...]
    sources: tuple[str, ...] = ()  # inputs besides the layout's ``core`` paths
    cmake_args: tuple[str, ...] = ("-DCMAKE_BUILD_TYPE=Release",)
    # variable -> module: when the variable is unset, the build gets that module's directory in the
    # workers' interpreter (TE's CMake finds cuDNN through CUDNN_PATH; pip's nvidia-cudnn has it)
    module_dirs: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def is_artifact(self, name: str) -> bool:
        return matches_name(name, self.artifacts)


@dataclasses.dataclass(frozen=True)
class PackageLayout:
    name: str
    core: tuple[str, ...] = ()
    extension: ExtensionBuild | None = None
    core_build: CoreBuild | None = None
    version_files: tuple[str, ...] = ()
    unrelated: tuple[str, ...] = ()
    build_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cuda_archs_env: str | None = None  # the variable that takes the local GPU's CUDA archs (NVTE_CUDA_ARCHS)


GENERIC = PackageLayout(name="generic")

TE_LAYOUT = PackageLayout(
    name="transformer_engine",
    core=("transformer_engine/common/",),
    extension=ExtensionBuild(
        sources=(
            "transformer_engine/pytorch/csrc/",
            "transformer_engine/pytorch/setup.py",
            "build_tools/pytorch.py",
        ),
        setup_dir="transformer_engine/pytorch",
        artifacts=("transformer_engine_torch*.so",),
        import_check="transformer_engine.pytorch",
        env={"NVTE_PYTORCH_FORCE_BUILD": "TRUE", "NVTE_FRAMEWORK": "pytorch"},
        # setup.py copies build_tools/ and the core's headers (common/**/*.h, *.cuh) into its tree
        hash_also=("build_tools/", "transformer_engine/common/*.h", "transformer_engine/common/*.cuh"),
    ),
    core_build=CoreBuild(
        cmake_dir="transformer_engine/common",
        artifacts=("libtransformer_engine.so",),
        # CMakeLists.txt takes cuDNN frontend and CUTLASS from 3rdparty/ (submodules)
        sources=("3rdparty/",),
        module_dirs={"CUDNN_PATH": "nvidia.cudnn"},
    ),
    version_files=("build_tools/VERSION.txt",),
    unrelated=("transformer_engine/jax/", "build_tools/jax.py"),
    build_env={"NVTE_FRAMEWORK": "pytorch"},
    cuda_archs_env="NVTE_CUDA_ARCHS",
)

BUILT_IN = {"transformer_engine": TE_LAYOUT}


def layout_for(package: str, path: str | os.PathLike | None = None) -> PackageLayout:
    """The layout from ``path`` (a TOML file) if given, else the built-in one for ``package``."""
    return load_layout(path) if path else BUILT_IN.get(package, GENERIC)


def _load(cls, data: Mapping, where: str, table: str = "", **given):
    """A ``cls`` from TOML table ``table``: its fields without a default required, the rest typed by field."""
    fields = dataclasses.fields(cls)
    missing = [f.name for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    missing = [name for name in missing if not data.get(name)]
    if table and missing:
        raise TeperfError(
            f"{where}: [{table}] lacks {', '.join(missing)}", "add them (see teperf/sides/layout.py)"
        )
    for f in fields:
        value = data.get(f.name)
        if f.name in given or value is None:
            continue
        if f.type == "tuple[str, ...]":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TeperfError(f"{where}: {f.name} must be a list of strings", "fix the layout file")
            given[f.name] = tuple(value)
        elif f.type == "Mapping[str, str]":
            if not isinstance(value, dict):
                raise TeperfError(f"{where}: {f.name} must be a table of strings", "fix the layout file")
            given[f.name] = {str(k): str(v) for k, v in value.items()}
        else:
            given[f.name] = str(value).strip("/")  # a directory: no trailing /
    return cls(**given)


def load_layout(path: str | os.PathLike) -> PackageLayout:
    where = f"--layout {path}"
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise TeperfError(f"{where}: cannot read it ({exc.strerror})", "pass an existing TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise TeperfError(f"{where} is not valid TOML: {exc}", "fix the layout file") from None
    known = {field.name for field in dataclasses.fields(PackageLayout)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise TeperfError(
            f"{where}: unknown key(s) {', '.join(unknown)}", f"use only {', '.join(sorted(known))}"
        )
    tables = {"extension": ExtensionBuild, "core_build": CoreBuild}
    built = {key: _load(cls, data[key], where, key) for key, cls in tables.items() if key in data}
    name = str(data.get("name") or os.path.basename(os.fspath(path)))
    return _load(PackageLayout, data, where, name=name, **built)
