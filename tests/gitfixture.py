"""A throw-away git repository of a small plain-PyTorch package, for the git/overlay/build tests.

Never committed to teperf: each test makes its own under tmp_path.

History (branch ``main``)::

    base  (tag v0.1.0)  mypkg: blocks.make_mlp / make_norm, old.py, _table.json (data file read at import)
    head                make_mlp's forward busy-waits ~200 us; old.py deleted, new.py added   (.py only)
    cpp   (branch cpp)  from head: adds mypkg/csrc/op.cpp                                     (build input)

plus branch ``topic`` from base (one .py commit), for ``A...B``. The
"installed" copy (``site/``) is base's package plus a data file that differs
from git's (to see which one is read), a fake compiled library ``_native.so``,
a generated ``_version_gen.py`` that is not in git, and ``mypkg-0.1.0.dist-info``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "teperf tests",
    "GIT_AUTHOR_EMAIL": "tests@teperf.invalid",
    "GIT_COMMITTER_NAME": "teperf tests",
    "GIT_COMMITTER_EMAIL": "tests@teperf.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}

INIT = '''\
"""mypkg: plain-PyTorch blocks for teperf's git tests."""
import json as _json
from pathlib import Path as _Path

# a data file read at import: in an overlay it is a symlink to the installed one
DATA = _json.loads((_Path(__file__).parent / "_table.json").read_text())
'''

BLOCKS = """\
import time

import torch
from torch import nn

SLOW = {slow}
SPIN_NS = 200_000


def _spin(ns):
    # thread CPU time, not wall time: teperf measures CPU time, so a wall-clock spin shrinks when the
    # machine is loaded and the thread is descheduled mid-spin
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        if SLOW:
            _spin(SPIN_NS)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class Norm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x)


def make_mlp(width=32, depth=2):
    return MLP(width, depth)


def make_norm(width=32):
    return Norm(width)
"""

BUILD_SCRIPT = '''\
"""A stand-in build: 'installs' ./mypkg into PREFIX, counts its runs, can be told to fail."""
import os, shutil, sys
from pathlib import Path

prefix, counter = Path(sys.argv[1]), Path(sys.argv[2])
with open(counter, "a") as f:
    f.write(os.getcwd() + "\\n")
print("building in", os.getcwd())
if os.environ.get("FIXTURE_BUILD_FAIL"):
    print("error: compiler exploded (planted)")
    sys.exit(3)
src = Path("mypkg")
shutil.copytree(src, prefix / "mypkg", ignore=shutil.ignore_patterns("csrc"))
(prefix / "mypkg" / "_native.so").write_bytes(b"\\x7fELF fake built library")
(prefix / "mypkg" / "_built_marker.txt").write_text("built\\n")
dist = prefix / "mypkg-0.1.0.dist-info"
dist.mkdir()
(dist / "METADATA").write_text("Metadata-Version: 2.1\\nName: mypkg\\nVersion: 0.1.0\\n")
(dist / "top_level.txt").write_text("mypkg\\n")
(dist / "RECORD").write_text("")
print("done")
'''


def git(repo, *args, check=True) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {args} failed: {proc.stderr}")
    return proc.stdout.strip()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text) if text.startswith("\n") else text)


def write_dist_info(site: Path, name: str, version: str) -> None:
    """The installed distribution's metadata, as pip leaves it (importlib.metadata finds the package)."""
    dist = site / f"{name}-{version}.dist-info"
    dist.mkdir()
    write(dist / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    write(dist / "top_level.txt", f"{name}\n")
    write(dist / "RECORD", "")


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Fixture:
    root: Path  # tmp dir
    repo: Path
    site: Path  # the 'installed' package's site dir (put on PYTHONPATH)
    base: str
    head: str
    cpp: str
    topic: str
    build_script: Path
    counter: Path

    def build_command(self) -> list[str]:
        return [sys.executable, str(self.build_script), "{prefix}", str(self.counter)]

    def builds_run(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0


def make_fixture(root: Path, *, install: bool = True) -> Fixture:
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "teperf tests")
    git(repo, "config", "user.email", "tests@teperf.invalid")
    git(repo, "config", "commit.gpgsign", "false")
    pkg = repo / "mypkg"
    write(pkg / "__init__.py", INIT)
    write(pkg / "blocks.py", BLOCKS.format(slow="False"))
    write(pkg / "old.py", "GONE_IN_HEAD = True\n")
    write(pkg / "_table.json", '{"origin": "git", "scale": 1}\n')
    write(repo / "README.md", "# mypkg\n")
    write(repo / "tests" / "test_mypkg.py", "def test_nothing():\n    pass\n")
    base = commit(repo, "base: mypkg blocks")
    git(repo, "tag", "v0.1.0")

    git(repo, "branch", "topic")
    write(pkg / "blocks.py", BLOCKS.format(slow="True"))
    (pkg / "old.py").unlink()
    write(pkg / "new.py", "ADDED_IN_HEAD = True\n")
    head = commit(repo, "head: make_mlp busy-waits 200 us")

    git(repo, "checkout", "-q", "-b", "cpp")
    write(pkg / "csrc" / "op.cpp", "int op() { return 1; }\n")
    cpp = commit(repo, "cpp: add a compiled source")
    git(repo, "checkout", "-q", "topic")
    write(pkg / "topic.py", "TOPIC = 1\n")
    topic = commit(repo, "topic: a python-only change")
    git(repo, "checkout", "-q", "main")

    site = root / "site"
    site.mkdir()
    if install:
        installed = site / "mypkg"
        shutil.copytree(pkg, installed, ignore=shutil.ignore_patterns("csrc", "new.py"))
        write(installed / "old.py", "GONE_IN_HEAD = True\n")
        write(installed / "blocks.py", BLOCKS.format(slow="False"))
        write(installed / "_table.json", '{"origin": "installed", "scale": 1}\n')
        (installed / "_native.so").write_bytes(b"\x7fELF fake compiled library")
        write(installed / "_version_gen.py", "GENERATED = True\n")
        write_dist_info(site, "mypkg", "0.1.0")
    build_script = root / "fake_build.py"
    write(build_script, BUILD_SCRIPT)
    return Fixture(
        root=root,
        repo=repo,
        site=site,
        base=base,
        head=head,
        cpp=cpp,
        topic=topic,
        build_script=build_script,
        counter=root / "builds.txt",
    )


# ---------------------------------------------------------------------------- a package with a C++ extension

EXT_INIT = '''\
"""extpkg: a core library and a torch.utils.cpp_extension extension, loaded the way TE loads its own."""
import ctypes
import glob
import importlib.util
import os
import sys

import torch  # noqa: F401  (the extension links libtorch: it loads after torch)

_lib = os.path.join(os.path.dirname(__file__), "_lib")


def _one(pattern):
    found = glob.glob(os.path.join(_lib, pattern))
    if len(found) != 1:
        raise RuntimeError(f"expected one {pattern} in {_lib}, found {found}")
    return found[0]


_CORE = ctypes.CDLL(_one("libextpkg_core.so"), mode=ctypes.RTLD_GLOBAL)  # the extension does not link it
_spec = importlib.util.spec_from_file_location("extpkg_ext", _one("extpkg_ext*.so"))
ext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ext)
sys.modules["extpkg_ext"] = ext
'''

EXT_BLOCKS = '''\
import torch
from torch import nn

from extpkg import ext


class Block(nn.Module):
    """Calls into the extension every step (its host work is what the csrc commits change)."""

    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        ext.host_work()
        return torch.relu(self.linear(x))


class Plain(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.linear(x))


def make_block(width=32):
    return Block(width)


def make_plain(width=32):
    return Plain(width)
'''

EXT_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="extpkg_ext",
    version="0.1.0",
    ext_modules=[CppExtension("extpkg._lib.extpkg_ext", ["csrc/ext.cpp"])],
    cmdclass={"build_ext": BuildExtension},
)
"""

EXT_CPP = """\
#include <Python.h>

#include <chrono>

extern "C" int extpkg_core_version(void);  // from the core library, loaded RTLD_GLOBAL first
{extra_decl}
static const long long SPIN_NS = {spin_ns};

static PyObject* host_work(PyObject*, PyObject*) {{
  auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(SPIN_NS);
  while (std::chrono::steady_clock::now() < end) {{
  }}
  return PyLong_FromLong(extpkg_core_version(){extra_call});
}}

static PyMethodDef methods[] = {{{{"host_work", host_work, METH_NOARGS, "host work per step"}},
                                {{nullptr, nullptr, 0, nullptr}}}};
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "extpkg_ext", nullptr, -1, methods}};

PyMODINIT_FUNC PyInit_extpkg_ext(void) {{ return PyModule_Create(&module); }}
"""

EXT_CORE = "int extpkg_core_version(void) { return %d; }\n"
# the core, spinning 200 us per call (the extension calls it every step): a planted core slowdown
EXT_CORE_SPIN = """\
#include <time.h>

int extpkg_core_version(void) {
  struct timespec now, end;
  clock_gettime(CLOCK_MONOTONIC, &end);
  end.tv_nsec += 200000;
  if (end.tv_nsec >= 1000000000) { end.tv_sec += 1; end.tv_nsec -= 1000000000; }
  do { clock_gettime(CLOCK_MONOTONIC, &now); }
  while (now.tv_sec < end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
  return 1;
}
"""
EXT_CORE_EXTRA = "int extpkg_core_extra(void) { return 7; }\n"
EXT_CORE_CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(extpkg_core C)
add_library(extpkg_core SHARED core.c extra.c)
"""

EXT_LAYOUT = """\
name = "extpkg"
core = ["extpkg/core/"]
version_files = ["VERSION.txt"]

[extension]
sources = ["extpkg/ext/"]
setup_dir = "extpkg/ext"
artifacts = ["extpkg_ext*.so"]
import_check = "extpkg"

[core_build]
cmake_dir = "extpkg/core"
artifacts = ["libextpkg_core.so"]
"""


@dataclass
class ExtFixture:
    root: Path
    repo: Path
    site: Path  # the installed package: base's .py files, its core library, an installed (fake) extension
    layout: Path  # the --layout file
    base: str  # tag v0.1.0
    head: str  # csrc: host_work spins 200 us                  (extension tier)
    pyonly: str  # from base: a .py change                      (overlay)
    version: str  # from base: VERSION.txt only                  (overlay + note)
    core: str  # from base: the core library's source          (core)
    badsym: str  # from base: csrc calls a symbol the installed core lacks
    corespin: str = ""  # from base: the core spins 200 us per call (core)


def make_ext_fixture(root: Path) -> ExtFixture:
    repo = root / "extrepo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "teperf tests")
    git(repo, "config", "user.email", "tests@teperf.invalid")
    git(repo, "config", "commit.gpgsign", "false")
    pkg = repo / "extpkg"
    write(repo / "VERSION.txt", "0.1.0\n")
    write(pkg / "__init__.py", EXT_INIT)
    write(pkg / "blocks.py", EXT_BLOCKS)
    write(pkg / "core" / "core.c", EXT_CORE % 1)
    write(pkg / "core" / "extra.c", EXT_CORE_EXTRA)
    write(pkg / "core" / "CMakeLists.txt", EXT_CORE_CMAKE)
    write(pkg / "ext" / "setup.py", EXT_SETUP)
    write(pkg / "ext" / "csrc" / "ext.cpp", EXT_CPP.format(spin_ns=0, extra_decl="", extra_call=""))
    base = commit(repo, "base: extpkg with a core library and an extension")
    git(repo, "tag", "v0.1.0")

    def branch(name: str, edits: dict, message: str) -> str:
        git(repo, "checkout", "-q", "-b", name, base)
        for rel, text in edits.items():
            write(repo / rel, text)
        sha = commit(repo, message)
        git(repo, "checkout", "-q", "main")
        return sha

    cpp = "extpkg/ext/csrc/ext.cpp"
    pyonly = branch("pyonly", {"extpkg/blocks.py": EXT_BLOCKS + "\nEXTRA = 1\n"}, "pyonly: a Python change")
    version = branch("version", {"VERSION.txt": "0.1.1\n"}, "version: bump to 0.1.1")
    core = branch("core", {"extpkg/core/core.c": EXT_CORE % 2}, "core: a core library change")
    corespin = branch(
        "corespin", {"extpkg/core/core.c": EXT_CORE_SPIN}, "corespin: the core spins 200 us per call (C)"
    )
    badsym = branch(
        "badsym",
        {
            cpp: EXT_CPP.format(
                spin_ns=0,
                extra_decl='extern "C" int extpkg_core_new(void);',
                extra_call=" + extpkg_core_new()",
            )
        },
        "badsym: the extension needs a new core symbol",
    )
    write(repo / cpp, EXT_CPP.format(spin_ns=200_000, extra_decl="", extra_call=""))
    head = commit(repo, "head: host_work spins 200 us in C++")

    site = root / "extsite"
    lib = site / "extpkg" / "_lib"
    lib.mkdir(parents=True)
    for name in ("__init__.py", "blocks.py"):
        git_show = git(repo, "show", f"{base}:extpkg/{name}")
        write(site / "extpkg" / name, git_show + "\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib / "libextpkg_core.so"), "-x", "c", "-"],
        input=EXT_CORE % 1,
        text=True,
        check=True,
    )
    (lib / "extpkg_ext.cpython-fake.so").write_bytes(b"\x7fELF an installed extension the sides replace")
    write_dist_info(site, "extpkg", "0.1.0")
    layout = root / "extpkg-layout.toml"
    write(layout, EXT_LAYOUT)
    return ExtFixture(
        root=root,
        repo=repo,
        site=site,
        layout=layout,
        base=base,
        head=head,
        pyonly=pyonly,
        version=version,
        core=core,
        badsym=badsym,
        corespin=corespin,
    )


# ---------------------------------------------------------------------------- TE-shaped paths (no real TE)

TE_FILES = {
    "setup.py": "# top-level build of the core and the extensions\n",
    "build_tools/VERSION.txt": "2.16.0\n",
    "build_tools/utils.py": "# build helpers\n",
    "build_tools/pytorch.py": "# how the PyTorch extension is built\n",
    "build_tools/jax.py": "# how the JAX extension is built\n",
    "docs/index.rst": "TE\n",
    "tests/pytorch/test_x.py": "def test_x():\n    pass\n",
    "transformer_engine/__init__.py": "",
    "transformer_engine/common/__init__.py": "# loads libtransformer_engine\n",
    "transformer_engine/common/gemm/gemm.cu": "// core\n",
    "transformer_engine/common/include/transformer_engine/gemm.h": "// core header\n",
    "transformer_engine/pytorch/__init__.py": "",
    "transformer_engine/pytorch/setup.py": "# builds transformer_engine_torch\n",
    "transformer_engine/pytorch/module/base.py": "X = 1\n",
    "transformer_engine/pytorch/csrc/quantizer.cpp": "// extension\n",
    "transformer_engine/pytorch/csrc/extensions/gemm.cpp": "// extension\n",
    "transformer_engine/jax/csrc/extensions.cpp": "// jax extension\n",
}

# branch -> files it changes (each one commit on top of base)
TE_EDITS = {
    "py": ["transformer_engine/pytorch/module/base.py"],
    "version": ["build_tools/VERSION.txt"],
    "py-version": ["transformer_engine/pytorch/module/base.py", "build_tools/VERSION.txt"],
    "common-py": ["transformer_engine/common/__init__.py"],
    "csrc": [
        "transformer_engine/pytorch/csrc/quantizer.cpp",
        "transformer_engine/pytorch/csrc/extensions/gemm.cpp",
        "transformer_engine/pytorch/module/base.py",
    ],
    "ext-setup": ["transformer_engine/pytorch/setup.py"],
    "ext-build-tools": ["build_tools/pytorch.py"],
    "common": ["transformer_engine/common/gemm/gemm.cu", "transformer_engine/pytorch/csrc/quantizer.cpp"],
    "common-header": ["transformer_engine/common/include/transformer_engine/gemm.h"],
    "build-file": ["setup.py"],
    "build-tools": ["build_tools/utils.py"],
    "jax": ["transformer_engine/jax/csrc/extensions.cpp", "build_tools/jax.py"],
    "docs-tests": ["docs/index.rst", "tests/pytorch/test_x.py"],
}


def make_te_shaped(root: Path) -> tuple[Path, Path]:
    """(a repo with TE's paths and one branch per TE_EDITS entry, tag v2.16; a site with a fake installed TE
    2.16.0)."""
    repo = root / "te"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "commit.gpgsign", "false")
    for rel, text in TE_FILES.items():
        write(repo / rel, text)
    base = commit(repo, "TE-shaped base")
    git(repo, "tag", "v2.16")
    for name, paths in TE_EDITS.items():
        git(repo, "checkout", "-q", "-b", name, base)
        for rel in paths:
            write(
                repo / rel,
                (repo / rel).read_text() + ("2.16.1\n" if rel.endswith("VERSION.txt") else "# edit\n"),
            )
        if name in ("version", "py-version"):
            write(repo / "build_tools/VERSION.txt", "2.16.1\n")
        commit(repo, f"{name}: edit {', '.join(paths)}")
    git(repo, "checkout", "-q", "main")
    site = root / "te-site"
    pkg = site / "transformer_engine"
    (pkg / "wheel_lib").mkdir(parents=True)
    for rel in ("__init__.py", "common/__init__.py", "pytorch/__init__.py", "pytorch/module/base.py"):
        write(pkg / rel, TE_FILES[f"transformer_engine/{rel}"])
    (pkg / "wheel_lib" / "libtransformer_engine.so").write_bytes(b"\x7fELF fake core")
    (pkg / "wheel_lib" / "transformer_engine_torch.cpython-312-x86_64-linux-gnu.so").write_bytes(
        b"\x7fELF fake ext"
    )
    dist = site / "transformer_engine-2.16.0.dist-info"
    dist.mkdir()
    write(dist / "METADATA", "Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.16.0\n")
    write(dist / "top_level.txt", "transformer_engine\n")
    return repo, site


PURE_INIT = "from .core import work\n"
PURE_CORE = "def work(x):\n    return x + {n}\n"


def make_pure_python(root: Path) -> Path:
    """Research code in git: a package and nothing to build (no setup.py, no pyproject, no compiled files)."""
    repo = root / "research"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "commit.gpgsign", "false")
    write(repo / "src" / "research" / "__init__.py", PURE_INIT)
    write(repo / "src" / "research" / "core.py", PURE_CORE.format(n=1))
    write(
        repo / "tools" / "plot.sh", "echo plot\n"
    )  # not Python, not docs: counts as a build input elsewhere
    commit(repo, "v1")
    git(repo, "tag", "v1")
    write(repo / "src" / "research" / "core.py", PURE_CORE.format(n=2))
    write(repo / "tools" / "plot.sh", "echo plot2\n")
    commit(repo, "v2")
    return repo


# --------------------------------------------------------------------- a longer history, for teperf bisect

HISTORY_BLOCKS = """\
import time

import torch
from torch import nn

REVISION = {revision}
SPIN_NS = {spin_ns}
EXTRA_CALLS = {extra_calls}
{broken}

def _touch(x):
    return x


class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        # inline, so that a spin adds no Python call; thread CPU time, so a plant keeps its size on a
        # loaded machine
        end = time.thread_time_ns() + SPIN_NS
        while time.thread_time_ns() < end:
            pass
        for _ in range(EXTRA_CALLS):
            x = _touch(x)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def make_mlp(width=32, depth=2):
    return MLP(width, depth)


def make_norm(width=32):
    return nn.LayerNorm(width)
"""


# the config of the bisect tests: one factory module of the history's package
HISTORY_CONFIG = """\
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[8, 2, 32]]

[modules.MLP]
factory = "mypkg.blocks:make_mlp"
kwargs = { width = 32, depth = 2 }
"""


@dataclass
class History:
    repo: Path
    site: Path  # the 'installed' package (GOOD's), for overlay
    shas: list  # shas[0] is GOOD (tag 'good'), shas[-1] BAD (tag 'bad')
    culprit: str


def make_history(
    root: Path,
    *,
    n: int = 20,
    culprit: int = 13,
    extra_calls: int = 0,
    spin_ns: int = 0,
    broken: tuple = (),
    steps: dict | None = None,
) -> History:
    """GOOD and ``n`` first-parent commits after it that each change a revision number in blocks.py;
    commit ``culprit`` (1..n) also sets EXTRA_CALLS / SPIN_NS, kept by the later ones. Commits whose
    index is in ``broken`` do not import (a syntax error), the next one fixes it.

    ``steps`` plants several changes instead: {commit index: {"extra_calls": N, "spin_ns": NS}}, each
    value kept from that commit on until a later step sets it again (culprit is then the first step)."""
    if steps is None:
        steps = {culprit: {"extra_calls": extra_calls, "spin_ns": spin_ns}} if culprit > 0 else {}
    else:
        culprit = min(steps)
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "commit.gpgsign", "false")
    pkg = repo / "mypkg"
    write(pkg / "__init__.py", '"""mypkg: blocks for teperf bisect tests."""\n')

    def blocks(i: int) -> str:
        planted = {"extra_calls": 0, "spin_ns": 0}
        for at in sorted(steps):
            if at <= i:
                planted.update(steps[at])
        return HISTORY_BLOCKS.format(
            revision=i,
            spin_ns=planted["spin_ns"],
            extra_calls=planted["extra_calls"],
            broken="this is not python (planted)" if i in broken else "",
        )

    write(pkg / "blocks.py", blocks(0))
    shas = [commit(repo, "GOOD: mypkg blocks")]
    git(repo, "tag", "good")
    for i in range(1, n + 1):
        what = "planted" if i in steps else ("broken" if i in broken else "revision")
        if i % 4 == 0:  # a merge of a side branch: the first-parent history skips the side's commit
            git(repo, "checkout", "-q", "-b", f"side{i}")
            write(repo / "docs" / f"note{i}.md", f"note {i}\n")
            commit(repo, f"side {i}: a note")
            git(repo, "checkout", "-q", "main")
            git(repo, "merge", "-q", "--no-ff", "--no-commit", f"side{i}")
            write(pkg / "blocks.py", blocks(i))
            shas.append(commit(repo, f"commit {i}: merge side {i}, {what}"))
            continue
        write(pkg / "blocks.py", blocks(i))
        shas.append(commit(repo, f"commit {i}: {what}"))
    git(repo, "tag", "bad")
    site = root / "site"
    shutil.copytree(pkg, site / "mypkg")
    write_dist_info(site, "mypkg", "0.1.0")
    # the installed copy is GOOD's
    write(site / "mypkg" / "blocks.py", blocks(0))
    return History(repo=repo, site=site, shas=shas, culprit=shas[culprit])


# --------------------------------------------------------------------- one module at the repo root (nanoGPT)

SINGLE_MODEL = """\
import torch
from torch import nn

EXTRA_CALLS = {extra_calls}


def _touch(x):
    return x


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.head = nn.Linear(width, vocab)

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for _ in range(EXTRA_CALLS):
            x = _touch(x)
        logits = self.head(x + self.mlp(x))
        loss = None if targets is None else logits.float().mean()
        return logits, loss
"""

# Outside the repo, as a user's own helper is: it reaches the side's model.py through the side's tree
# (first on sys.path) and itself through the shell's PYTHONPATH.
SINGLE_FACTORY = """\
import torch


def make_model(vocab=64, width=32):
    from model import TinyGPT

    return TinyGPT(vocab, width)


def make_inputs(shape, dtype, device):
    # token ids: integers, no grad; the shape is [batch, seq]
    return (torch.randint(0, 64, tuple(shape), device=device),)
"""

SINGLE_CONFIG = """\
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[2, 8]]

[modules.TinyGPT]
factory = "nanofactory:make_model"
inputs = "nanofactory:make_inputs"
kwargs = { vocab = 64, width = 32 }
"""


@dataclass
class SingleModule:
    repo: Path
    helpers: Path  # holds nanofactory.py: put on PYTHONPATH
    config: Path
    base: str
    head: str


def make_single_module(root: Path) -> SingleModule:
    """A nanoGPT-shaped repo: ``model.py`` and ``train.py`` at the root, an image; base..head adds 5
    Python calls per forward in model.py and changes the image (a data file, not a build input)."""
    repo = root / "nanogpt"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "commit.gpgsign", "false")
    write(repo / "model.py", SINGLE_MODEL.format(extra_calls=0))
    write(repo / "train.py", "from model import TinyGPT\n\nif __name__ == '__main__':\n    TinyGPT()\n")
    (repo / "images").mkdir()
    (repo / "images" / "arch.png").write_bytes(b"\x89PNG\r\n\x1a\n one")
    base = commit(repo, "base: TinyGPT")
    write(repo / "model.py", SINGLE_MODEL.format(extra_calls=5))
    (repo / "images" / "arch.png").write_bytes(b"\x89PNG\r\n\x1a\n two")
    head = commit(repo, "head: 5 more calls per forward, a new image")
    helpers = root / "helpers"
    write(helpers / "nanofactory.py", SINGLE_FACTORY)
    config = root / "nano.toml"
    write(config, SINGLE_CONFIG)
    return SingleModule(repo=repo, helpers=helpers, config=config, base=base, head=head)


def planted_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="n", GIT_AUTHOR_EMAIL="n@x", GIT_COMMITTER_NAME="n")
    env["GIT_COMMITTER_EMAIL"] = "n@x"
    for side in ("base", "head"):
        shutil.rmtree(repo / "demo_blocks", ignore_errors=True)
        shutil.copytree(
            Path(__file__).resolve().parent.parent / "examples" / "planted" / side / "demo_blocks",
            repo / "demo_blocks",
        )
        for args in (["init", "-q"] if side == "base" else [], ["add", "-A"], ["commit", "-qm", side]):
            if args:
                subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return repo
